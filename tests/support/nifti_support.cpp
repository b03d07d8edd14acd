#include "nifti_support.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nifti2_io.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <tuple>

#include "u3d/io/synth.h"

namespace u3d::test {

TestNifti oblique(torch::Tensor data) {
  TestNifti v;
  v.data = std::move(data);
  v.pixdim = {0.8, 0.9, 2.5};
  v.qform_code = 1;
  v.quatern = {0.1, -0.2, 0.3};
  v.qoffset = {12.5, -20.25, 31.0};
  v.qfac = -1;
  v.sform_code = 2;
  v.srow = {0.79, 0.05, 0.0, 12.5, -0.04, 0.88, 0.1, -20.25, 0.0, -0.09, -2.45, 31.0};
  v.xyz_units = NIFTI_UNITS_MM;
  return v;
}

void write_test_nifti(const fs::path& path, const TestNifti& v) {
  const torch::Tensor t = v.data.contiguous();
  int datatype = 0;
  switch (t.scalar_type()) {
    case torch::kUInt8: datatype = DT_UINT8; break;
    case torch::kInt16: datatype = DT_INT16; break;
    case torch::kInt32: datatype = DT_INT32; break;
    case torch::kFloat: datatype = DT_FLOAT32; break;
    default: throw std::runtime_error("write_test_nifti: unsupported dtype");
  }
  // With nt > 1, data (nt * D, H, W) holds nt volumes of D rows.
  const int64_t dims[8] = {v.nt > 1 ? 4 : 3, t.size(2), t.size(1), t.size(0) / v.nt, v.nt, 1, 1, 1};
  nifti_image* nim = nifti_make_new_nim(dims, datatype, /*data_fill=*/0);
  nim->dx = nim->pixdim[1] = v.pixdim[0];
  nim->dy = nim->pixdim[2] = v.pixdim[1];
  nim->dz = nim->pixdim[3] = v.pixdim[2];
  nim->qform_code = v.qform_code;
  std::tie(nim->quatern_b, nim->quatern_c, nim->quatern_d) = std::tuple(v.quatern[0], v.quatern[1], v.quatern[2]);
  std::tie(nim->qoffset_x, nim->qoffset_y, nim->qoffset_z) = std::tuple(v.qoffset[0], v.qoffset[1], v.qoffset[2]);
  nim->qfac = v.qfac;
  nim->qto_xyz = nifti_quatern_to_dmat44(nim->quatern_b, nim->quatern_c, nim->quatern_d, nim->qoffset_x, nim->qoffset_y,
                                         nim->qoffset_z, nim->dx, nim->dy, nim->dz, nim->qfac);
  nim->sform_code = v.sform_code;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) nim->sto_xyz.m[r][c] = v.srow[static_cast<size_t>(r * 4 + c)];
  nim->sto_xyz.m[3][3] = 1;
  nim->xyz_units = v.xyz_units;
  nim->scl_slope = v.scl_slope;
  nim->scl_inter = v.scl_inter;
  nim->nifti_type = NIFTI_FTYPE_NIFTI1_1;
  nim->data = std::malloc(static_cast<size_t>(t.numel() * t.element_size()));
  std::memcpy(nim->data, t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()));
  if (nifti_set_filenames(nim, path.c_str(), 0, 1) != 0) throw std::runtime_error("nifti_set_filenames failed");
  nifti_image_write(nim);
  nifti_image_free(nim);
  if (!fs::exists(path)) throw std::runtime_error("write_test_nifti: nothing written at " + path.string());
}

HeaderFields read_header_fields(const fs::path& path) {
  nifti_image* nim = nifti_image_read(path.c_str(), 0);
  if (!nim) throw std::runtime_error("read_header_fields: cannot read " + path.string());
  HeaderFields h;
  h.dims = {nim->nx, nim->ny, nim->nz};
  h.pixdim = {nim->dx, nim->dy, nim->dz};
  h.qform_code = nim->qform_code;
  h.sform_code = nim->sform_code;
  h.xyz_units = nim->xyz_units;
  h.datatype = nim->datatype;
  h.quatern = {nim->quatern_b, nim->quatern_c, nim->quatern_d, nim->qoffset_x,
               nim->qoffset_y, nim->qoffset_z, nim->qfac};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) {
      h.sto_xyz[static_cast<size_t>(r * 4 + c)] = nim->sto_xyz.m[r][c];
      h.qto_xyz[static_cast<size_t>(r * 4 + c)] = nim->qto_xyz.m[r][c];
    }
  nifti_image_free(nim);
  return h;
}

std::pair<torch::Tensor, torch::Tensor> nnunet_raw_case(int index, const Shape3& shape) {
  const CaseData c = make_phantom_case(Task::kSegmentation, shape, /*seed=*/3, index);
  const torch::Tensor labels = torch::clamp_max(c.target, 2);  // tumour (3) -> 2; kidney (2) stays 2
  const torch::Tensor ct = torch::round(c.image[0] * 100.0f);  // HU-like integers
  const torch::Tensor t2 = c.image[0] * 2.0f + 0.5f;
  return {torch::stack({ct, t2}), labels.contiguous()};
}

fs::path make_nnunet_raw(const fs::path& dir, int cases, const Shape3& shape, int test_cases,
                         const std::string& ending) {
  const fs::path root = dir / "Dataset001_Test";
  fs::create_directories(root / "imagesTr");
  fs::create_directories(root / "labelsTr");
  if (test_cases > 0) fs::create_directories(root / "imagesTs");
  std::ofstream(root / "dataset.json") << fmt::format(R"({{
    "channel_names": {{"0": "CT", "1": "T2"}},
    "labels": {{"background": 0, "liver": 1, "tumour": 2}},
    "numTraining": {},
    "file_ending": "{}"
}}
)",
                                                      cases, ending);
  for (int i = 0; i < cases + test_cases; ++i) {
    const bool test = i >= cases;
    const std::string id = fmt::format("case_{:03d}", i);
    const auto [image, labels] = nnunet_raw_case(i, shape);
    const fs::path images = root / (test ? "imagesTs" : "imagesTr");
    TestNifti ct = oblique(image[0].to(torch::kInt16));
    ct.qoffset[0] += i;  // each case its own origin
    ct.srow[3] += i;
    TestNifti t2 = ct;
    t2.data = image[1].contiguous();
    write_test_nifti(images / (id + "_0000" + ending), ct);
    write_test_nifti(images / (id + "_0001" + ending), t2);
    if (!test) {
      TestNifti seg = ct;
      seg.data = labels.to(torch::kUInt8);
      write_test_nifti(root / "labelsTr" / (id + ending), seg);
    }
  }
  return root;
}

void expect_same_label_geometry(const fs::path& input, const fs::path& output) {
  const auto in = read_header_fields(input);
  const auto out = read_header_fields(output);
  EXPECT_EQ(out.dims, in.dims) << output;
  EXPECT_EQ(out.pixdim, in.pixdim) << output;
  EXPECT_EQ(out.qform_code, in.qform_code) << output;
  EXPECT_EQ(out.quatern, in.quatern) << output;
  EXPECT_EQ(out.qto_xyz, in.qto_xyz) << output;
  EXPECT_EQ(out.sform_code, in.sform_code) << output;
  EXPECT_EQ(out.sto_xyz, in.sto_xyz) << output;
  EXPECT_EQ(out.xyz_units, in.xyz_units) << output;
  EXPECT_EQ(out.datatype, DT_UINT8) << output;
}

}  // namespace u3d::test
