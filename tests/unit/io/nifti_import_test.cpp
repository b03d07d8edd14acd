// NIfTI reading and writing through nifticlib, and the nnU-Net / NIfTI-folder importers: values,
// geometry, normalisation statistics, resampling, and a failure naming the file for every bad input.
#include <gtest/gtest.h>

#include <fstream>

#include <nifti2_io.h>

#include "expectations.h"
#include "nifti_support.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/stats.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/import.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/synth.h"

namespace u3d {
namespace {

using test::error_of;

using test::TestNifti;

torch::Tensor ramp(const Shape3& s, torch::ScalarType t) {
  return torch::arange(s[0] * s[1] * s[2], torch::kFloat).reshape({s[0], s[1], s[2]}).to(t);
}

TEST(Nifti, ReadsValuesInFileOrderAndTheGeometry) {
  test::TempDir dir;
  TestNifti v = test::oblique(ramp({3, 4, 5}, torch::kInt16));
  for (const char* name : {"a.nii", "a.nii.gz"}) {
    test::write_test_nifti(dir / name, v);
    const NiftiVolume r = read_nifti(dir / name);
    ASSERT_EQ(r.data.sizes(), (torch::IntArrayRef{3, 4, 5}));  // (nz, ny, nx)
    EXPECT_EQ(r.data.scalar_type(), torch::kInt16);
    EXPECT_TRUE(torch::equal(r.data, v.data));
    // Voxel (i=4, j=1, k=2) is the 2*20 + 1*5 + 4 = 49th value of the file.
    EXPECT_EQ(r.data[2][1][4].item<int>(), 49);
    const SourceGeometry& g = r.geometry;
    EXPECT_EQ(g.shape, (Shape3{3, 4, 5}));
    EXPECT_NEAR(g.spacing[0], 2.5, 1e-6);  // dz
    EXPECT_NEAR(g.spacing[1], 0.9, 1e-6);  // dy
    EXPECT_NEAR(g.spacing[2], 0.8, 1e-6);  // dx
    EXPECT_EQ(g.qform_code, 1);
    EXPECT_EQ(g.sform_code, 2);
    EXPECT_NEAR(g.quatern[0], 0.1, 1e-6);
    EXPECT_NEAR(g.quatern[5], 31.0, 1e-6);
    EXPECT_EQ(g.quatern[6], -1.0);
    EXPECT_NEAR(g.sform[1], 0.05, 1e-6);
    EXPECT_NEAR(g.sform[11], 31.0, 1e-6);
    EXPECT_EQ(g.affine, g.sform);  // sform_code > 0: the sform is the affine
    EXPECT_EQ(g.xyzt_units, 2);
    EXPECT_EQ(g.file_ending, std::string(name).substr(1));
  }
  v.sform_code = 0;
  test::write_test_nifti(dir / "q.nii.gz", v);
  const SourceGeometry q = read_nifti_geometry(dir / "q.nii.gz");
  EXPECT_EQ(q.affine, q.qform);
  EXPECT_NEAR(q.qform[3], 12.5, 1e-6);  // qoffset_x
}

TEST(Nifti, ScaledIntegersAreReadAsScaledFloats) {
  test::TempDir dir;
  TestNifti v = test::oblique(ramp({2, 2, 2}, torch::kInt16));
  v.scl_slope = 2.0;
  v.scl_inter = -1.0;
  test::write_test_nifti(dir / "s.nii.gz", v);
  const NiftiVolume r = read_nifti(dir / "s.nii.gz");
  EXPECT_EQ(r.data.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(r.data, ramp({2, 2, 2}, torch::kFloat) * 2 - 1));
}

TEST(Nifti, WriterKeepsTheHeaderAndStreamsSlabs) {
  test::TempDir dir;
  TestNifti v = test::oblique(ramp({4, 3, 5}, torch::kInt16));
  test::write_test_nifti(dir / "in.nii.gz", v);
  const SourceGeometry g = read_nifti_geometry(dir / "in.nii.gz");
  for (const char* name : {"out.nii.gz", "out.nii"}) {
    const auto labels = (ramp({4, 3, 5}, torch::kInt32) % 3).to(torch::kUInt8);
    NiftiWriter w(dir / name, g, torch::kUInt8, "test");
    w.write_slab(labels.slice(0, 0, 1));
    w.write_slab(labels.slice(0, 1, 4));
    EXPECT_FALSE(fs::exists(dir / name));  // only under a temporary name until commit()
    w.commit();
    const auto in = test::read_header_fields(dir / "in.nii.gz");
    const auto out = test::read_header_fields(dir / name);
    EXPECT_EQ(out.dims, in.dims);
    EXPECT_EQ(out.pixdim, in.pixdim);
    EXPECT_EQ(out.qform_code, in.qform_code);
    EXPECT_EQ(out.sform_code, in.sform_code);
    EXPECT_EQ(out.quatern, in.quatern);
    EXPECT_EQ(out.sto_xyz, in.sto_xyz);
    EXPECT_EQ(out.qto_xyz, in.qto_xyz);
    EXPECT_EQ(out.xyz_units, in.xyz_units);
    EXPECT_EQ(out.datatype, DT_UINT8);
    EXPECT_TRUE(torch::equal(read_nifti(dir / name).data, labels));
  }
}

TEST(Nifti, UnfinishedWriterLeavesNothing) {
  test::TempDir dir;
  {
    NiftiWriter w(dir / "x.nii.gz", plain_geometry({4, 4, 4}, {1, 1, 1}), torch::kUInt8);
    w.write_slab(torch::zeros({2, 4, 4}, torch::kUInt8));
    EXPECT_THROW(w.commit(), IoError);  // 2 of 4 rows
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Nifti, BadFilesNameTheFile) {
  test::TempDir dir;
  TestNifti v = test::oblique(ramp({8, 8, 8}, torch::kFloat));
  test::write_test_nifti(dir / "good.nii", v);
  test::write_test_nifti(dir / "good.nii.gz", v);
  const std::string bytes = test::read_text(dir / "good.nii");
  const std::string gz = test::read_text(dir / "good.nii.gz");
  test::write_text(dir / "short.nii", bytes.substr(0, bytes.size() - 100));  // voxels cut off
  test::write_text(dir / "short.nii.gz", gz.substr(0, gz.size() / 2));       // gzip stream cut off
  test::write_text(dir / "header.nii", bytes.substr(0, 200));                // header cut off
  test::write_text(dir / "text.nii.gz", "not a nifti file");
  for (const char* name : {"short.nii", "short.nii.gz", "header.nii", "text.nii.gz"}) {
    const std::string msg = error_of<DataError>([&] { read_nifti(dir / name); });
    EXPECT_NE(msg.find((dir / name).string()), std::string::npos) << msg;
  }
  EXPECT_NE(error_of<IoError>([&] { read_nifti(dir / "missing.nii.gz"); }).find("missing.nii.gz"), std::string::npos);
  TestNifti four = v;
  four.nt = 2;
  test::write_test_nifti(dir / "4d.nii.gz", four);
  const std::string msg = error_of<DataError>([&] { read_nifti(dir / "4d.nii.gz"); });
  EXPECT_NE(msg.find("2 volumes"), std::string::npos) << msg;
  // NaN survives reading (nifticlib's own loader would turn it into 0).
  TestNifti nan = v;
  nan.data = v.data.clone();
  nan.data[1][2][3] = std::numeric_limits<float>::quiet_NaN();
  test::write_test_nifti(dir / "nan.nii.gz", nan);
  EXPECT_TRUE(std::isnan(read_nifti(dir / "nan.nii.gz").data[1][2][3].item<float>()));
}

// ---------------------------------------------------------------------------------------------
class ImportNnunet : public ::testing::Test {
 protected:
  const Shape3 shape{12, 14, 16};
  test::TempDir dir;
  NiftiImportOptions options() const {
    NiftiImportOptions o;
    o.val_fraction = 0.25;
    o.threads = 2;
    return o;
  }
  // The import's error message, and that no output was left behind.
  std::string failure(const fs::path& raw) {
    const auto out = dir / "bad.h5";
    std::string msg = error_of<DataError>([&] { import_nnunet(raw, out, options()); });
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename().string().find(".bad.h5"), std::string::npos) << "partial file left";
    }
    return msg;
  }
};

TEST_F(ImportNnunet, KeepsValuesGeometryAndSplits) {
  const fs::path raw = test::make_nnunet_raw(dir.path(), 4, shape, /*test_cases=*/1);
  const ImportSummary s = import_nnunet(raw, dir / "d.h5", options());
  EXPECT_EQ(s.train, 3);
  EXPECT_EQ(s.val, 1);
  EXPECT_EQ(s.test, 1);
  const DatasetReader r(dir / "d.h5");
  const auto& info = r.info();
  EXPECT_EQ(info.task, Task::kSegmentation);
  EXPECT_EQ(info.channel_names, (std::vector<std::string>{"CT", "T2"}));
  EXPECT_EQ(info.num_classes, 3);
  EXPECT_EQ(info.class_names, (std::vector<std::string>{"background", "liver", "tumour"}));
  EXPECT_EQ(r.split("test"), (std::vector<std::string>{"case_004"}));
  for (int i = 0; i < 5; ++i) {
    const std::string id = fmt::format("case_{:03d}", i);
    const CaseData c = r.read_case(id);
    const auto [image, labels] = test::nnunet_raw_case(i, shape);
    EXPECT_TRUE(torch::equal(c.image[0], image[0])) << id;  // int16 CT exactly
    EXPECT_TRUE(torch::allclose(c.image[1], image[1])) << id;
    if (i < 4) {
      EXPECT_TRUE(torch::equal(c.target, labels)) << id;
    } else {
      EXPECT_FALSE(c.target.defined());
    }
    EXPECT_NEAR(c.spacing[0], 2.5, 1e-6);
    EXPECT_NEAR(c.spacing[2], 0.8, 1e-6);
    ASSERT_TRUE(c.source.has_value());
    const auto g = read_nifti_geometry(raw / (i < 4 ? "imagesTr" : "imagesTs") / (id + "_0000.nii.gz"));
    EXPECT_EQ(c.source->shape, shape);
    EXPECT_EQ(c.source->quatern, g.quatern);
    EXPECT_EQ(c.source->sform, g.sform);
    EXPECT_EQ(c.source->qform, g.qform);
    EXPECT_EQ(c.source->affine, g.affine);
    EXPECT_EQ(c.source->sform_code, 2);
    EXPECT_EQ(c.source->file_ending, ".nii.gz");
    EXPECT_EQ(c.source->files.size(), i < 4 ? 3u : 2u);
  }
  // CT: nnU-Net's clip-and-z-score with statistics of the foreground of the labelled cases.
  ASSERT_EQ(info.channel_normalization.size(), 2u);
  EXPECT_EQ(info.channel_normalization[1], "zscore");
  const ChannelNorm ct = parse_channel_norm(info.channel_normalization[0]);
  ASSERT_EQ(ct.kind, ChannelNorm::Kind::kCt) << info.channel_normalization[0];
  // nnU-Net draws the same number of foreground voxels from every case: the statistics are those of
  // the equal-weight mixture of the cases' foreground intensities (each voxel weighs 1 / n_case).
  std::vector<std::pair<double, double>> weighted;  // (value, weight)
  double mean = 0, square = 0;
  for (int i = 0; i < 4; ++i) {
    const auto [image, labels] = test::nnunet_raw_case(i, shape);
    const auto v = image[0].masked_select(labels > 0).to(torch::kDouble);
    const double w = 1.0 / static_cast<double>(v.numel()) / 4.0;
    for (int64_t k = 0; k < v.numel(); ++k) weighted.emplace_back(v[k].item<double>(), w);
    mean += v.mean().item<double>() / 4.0;
    square += v.square().mean().item<double>() / 4.0;
  }
  const double sd = std::sqrt(square - mean * mean);
  std::sort(weighted.begin(), weighted.end());
  auto quantile = [&](double p) {  // smallest value whose cumulative weight reaches p
    double cum = 0;
    for (const auto& [v, w] : weighted) {
      cum += w;
      if (cum >= p) return v;
    }
    return weighted.back().first;
  };
  // Sampled (with replacement, as nnU-Net): close to the mixture's statistics, not equal.
  EXPECT_NEAR(ct.mean, mean, 0.02 * sd);
  EXPECT_NEAR(ct.std, sd, 0.02 * sd);
  EXPECT_GE(ct.a, quantile(0.001));
  EXPECT_LE(ct.a, quantile(0.01));
  EXPECT_GE(ct.b, quantile(0.99));
  EXPECT_LE(ct.b, quantile(0.999));
  EXPECT_LT(ct.a, ct.b);
  // data.normalize = dataset resolves to these specs.
  DataConfig data;
  data.normalize = {"dataset"};
  EXPECT_EQ(resolve_normalization(data, info), info.channel_normalization);
  data.channels = {"T2"};
  EXPECT_EQ(resolve_normalization(data, info), (std::vector<std::string>{"zscore"}));
}

TEST_F(ImportNnunet, ResultDoesNotDependOnThreads) {
  const fs::path raw = test::make_nnunet_raw(dir.path(), 3, shape);
  NiftiImportOptions a = options(), b = options();
  a.threads = 1;
  b.threads = 3;
  import_nnunet(raw, dir / "a.h5", a);
  import_nnunet(raw, dir / "b.h5", b);
  const DatasetReader ra(dir / "a.h5"), rb(dir / "b.h5");
  EXPECT_EQ(ra.info().splits, rb.info().splits);
  EXPECT_EQ(ra.info().channel_normalization, rb.info().channel_normalization);
  for (const auto& id : ra.info().case_ids) {
    EXPECT_TRUE(torch::equal(ra.read_case(id).image, rb.read_case(id).image));
  }
}

TEST_F(ImportNnunet, ResamplesImagesTrilinearlyAndLabelsByNearestNeighbour) {
  const fs::path raw = test::make_nnunet_raw(dir.path(), 2, shape);
  NiftiImportOptions o = options();
  o.spacing = std::array<double, 3>{5.0, 1.8, 1.6};  // half the voxels along each axis
  const ImportSummary s = import_nnunet(raw, dir / "r.h5", o);
  EXPECT_EQ(s.resampled, 2);
  const DatasetReader r(dir / "r.h5");
  const CaseData c = r.read_case("case_000");
  EXPECT_EQ(c.image.sizes(), (torch::IntArrayRef{2, 6, 7, 8}));
  EXPECT_EQ(c.target.sizes(), (torch::IntArrayRef{6, 7, 8}));
  EXPECT_EQ(c.spacing, (std::array<double, 3>{5.0, 1.8, 1.6}));
  EXPECT_EQ(c.source->shape, shape);  // the grid predictions go back to
  EXPECT_NEAR(c.source->spacing[0], 2.5, 1e-6);
  const auto [image, labels] = test::nnunet_raw_case(0, shape);
  namespace F = torch::nn::functional;
  const auto expected = F::interpolate(
      image.unsqueeze(0),
      F::InterpolateFuncOptions().size(std::vector<int64_t>{6, 7, 8}).mode(torch::kTrilinear).align_corners(false))[0];
  EXPECT_TRUE(torch::allclose(c.image, expected, 1e-4, 1e-3));
  // Nearest neighbour at the voxel centres: output voxel o samples input voxel 2 o + 1.
  EXPECT_TRUE(torch::equal(c.target, labels.slice(0, 1, 12, 2).slice(1, 1, 14, 2).slice(2, 1, 16, 2)));
}

TEST_F(ImportNnunet, EveryBadInputNamesTheFile) {
  const auto make = [&](const std::string& name) {
    fs::remove(dir / "bad.h5");  // a failing import never writes it; a passing one would
    const fs::path d = dir / name;
    fs::create_directories(d);
    return test::make_nnunet_raw(d, 2, shape);
  };
  {  // a channel with other dims
    const fs::path raw = make("shape");
    const auto f = raw / "imagesTr" / "case_001_0001.nii.gz";
    test::write_test_nifti(f, test::oblique(torch::zeros({12, 14, 15})));
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("dims 15x14x12"), std::string::npos) << msg;
  }
  {  // a label with another voxel size
    const fs::path raw = make("spacing");
    const auto f = raw / "labelsTr" / "case_000.nii.gz";
    TestNifti v = test::oblique(std::get<1>(test::nnunet_raw_case(0, shape)));
    v.pixdim[2] = 3.0;
    test::write_test_nifti(f, v);
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("voxel size"), std::string::npos) << msg;
  }
  {  // a label value dataset.json does not declare
    const fs::path raw = make("label");
    const auto f = raw / "labelsTr" / "case_001.nii.gz";
    auto labels = std::get<1>(test::nnunet_raw_case(1, shape)).clone();
    labels[0][0][0] = 5;
    TestNifti v = test::oblique(labels);
    v.qoffset[0] += 1;
    v.srow[3] += 1;
    test::write_test_nifti(f, v);
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("label values 5 are not declared"), std::string::npos) << msg;
  }
  {  // NaN in an image
    const fs::path raw = make("nan");
    const auto f = raw / "imagesTr" / "case_000_0001.nii.gz";
    auto t2 = std::get<0>(test::nnunet_raw_case(0, shape))[1].clone();
    t2[3][4][5] = std::numeric_limits<float>::quiet_NaN();
    test::write_test_nifti(f, test::oblique(t2));
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("1 NaN or Inf"), std::string::npos) << msg;
  }
  {  // a truncated file
    const fs::path raw = make("truncated");
    const auto f = raw / "imagesTr" / "case_001_0000.nii.gz";
    const std::string bytes = test::read_text(f);
    test::write_text(f, bytes.substr(0, bytes.size() * 2 / 3));
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
  }
  {  // a missing channel file
    const fs::path raw = make("missing");
    const auto f = raw / "imagesTr" / "case_000_0001.nii.gz";
    fs::remove(f);
    const auto msg = failure(raw);
    EXPECT_NE(msg.find(f.string()), std::string::npos) << msg;
  }
  {  // region-based labels
    const fs::path raw = make("regions");
    test::write_text(raw / "dataset.json", R"({"channel_names": {"0": "CT", "1": "T2"},
      "labels": {"background": 0, "whole": [1, 2], "core": 2}, "file_ending": ".nii.gz"})");
    const auto msg = failure(raw);
    EXPECT_NE(msg.find("dataset.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("region"), std::string::npos) << msg;
  }
}

TEST(ImportNifti, ChannelsBySuffixAndClassesFromTheLabels) {
  test::TempDir dir;
  const Shape3 shape{8, 10, 12};
  fs::create_directories(dir / "img");
  fs::create_directories(dir / "seg");
  for (int i = 0; i < 3; ++i) {
    const auto [image, labels] = test::nnunet_raw_case(i, shape);
    const std::string id = fmt::format("p{}", i);
    test::write_test_nifti(dir / "img" / (id + "_t1.nii.gz"), test::oblique(image[1].contiguous()));
    test::write_test_nifti(dir / "img" / (id + "_flair.nii.gz"), test::oblique((image[1] * 3).contiguous()));
    test::write_test_nifti(dir / "seg" / (id + ".nii.gz"), test::oblique(labels.to(torch::kUInt8)));
  }
  NiftiFolders f;
  f.images = dir / "img";
  f.labels = dir / "seg";
  f.channel_suffixes = {"_t1", "_flair"};
  f.channel_names = {"t1", "flair"};
  NiftiImportOptions o;
  o.val_fraction = 0.34;
  const ImportSummary s = import_nifti_folders(f, dir / "n.h5", o);
  EXPECT_EQ(s.train + s.val, 3);
  const DatasetReader r(dir / "n.h5");
  EXPECT_EQ(r.info().channel_names, (std::vector<std::string>{"t1", "flair"}));
  EXPECT_EQ(r.info().num_classes, 3);  // labels 0..2 found
  EXPECT_EQ(r.info().channel_normalization, (std::vector<std::string>{"zscore", "zscore"}));
  const CaseData c = r.read_case("p1");
  const auto [image, labels] = test::nnunet_raw_case(1, shape);
  EXPECT_TRUE(torch::allclose(c.image[1], image[1] * 3));
  EXPECT_TRUE(torch::equal(c.target, labels));
  // Without labels every case goes to 'test', and --classes is needed.
  NiftiFolders g = f;
  g.labels.clear();
  EXPECT_THROW(import_nifti_folders(g, dir / "t.h5", o), UsageError);
  g.class_names = {"background", "a", "b"};
  const ImportSummary t = import_nifti_folders(g, dir / "t.h5", o);
  EXPECT_EQ(t.test, 3);
  // A case without a label file.
  fs::remove(dir / "seg" / "p2.nii.gz");
  EXPECT_NE(error_of<DataError>([&] { import_nifti_folders(f, dir / "u.h5", o); }).find("'p2'"), std::string::npos);
}

TEST(ImportSynth, NnunetPhantomRawFolderImportsBack) {
  test::TempDir dir;
  PhantomOptions o;
  o.task = Task::kSegmentation;
  o.cases = 4;
  o.size = {10, 12, 14};
  o.test_fraction = 0.25;
  write_phantom_nnunet_raw(o, dir / "Dataset900_Phantom");
  EXPECT_TRUE(fs::exists(dir / "Dataset900_Phantom" / "labelsTs" / "case_003.nii.gz"));
  NiftiImportOptions io;
  io.val_fraction = 0.34;
  const ImportSummary s = import_nnunet(dir / "Dataset900_Phantom", dir / "p.h5", io);
  EXPECT_EQ(s.train + s.val, 3);
  EXPECT_EQ(s.test, 1);
  const DatasetReader r(dir / "p.h5");
  EXPECT_EQ(r.info().class_names, phantom_info(Task::kSegmentation).class_names);
  for (int i = 0; i < 4; ++i) {
    const CaseData expected = make_phantom_case(Task::kSegmentation, o.size, 0, i);
    const CaseData got = r.read_case(expected.id);
    EXPECT_TRUE(torch::equal(got.image, expected.image));
    EXPECT_EQ(got.spacing, expected.spacing);
    if (i < 3) EXPECT_TRUE(torch::equal(got.target, expected.target));
  }
  o.task = Task::kDose;
  EXPECT_THROW(write_phantom_nnunet_raw(o, dir / "d"), UsageError);
}

TEST(Import, NormalisationFromChannelNamesAsNnunet) {
  test::expect_classes(
      normalization_for_channel_name,
      {{"ct", {"CT", "ct"}}, {"none", {"noNorm"}}, {"minmax", {"rescale_to_0_1"}}, {"zscore", {"T2"}}});
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 90), 4.6);
}

// A NIfTI header declaring 30000^3 voxels is refused from the header, before the voxel buffer is
// allocated (it used to end as "voxel data cannot be read (truncated file ...)" after a failed malloc).
TEST(NiftiRead, DeclaredSizesBeyondMemoryAreRefusedBeforeReading) {
  test::TempDir dir;
  const fs::path p = dir / "huge.nii";
  write_nifti(p, torch::zeros({2, 2, 2}, torch::kFloat), plain_geometry({2, 2, 2}, {1.0, 1.0, 1.0}));
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const int16_t dim = 30000;
    for (const std::streamoff offset : {42, 44, 46}) {  // dim[1..3] of the NIfTI-1 header
      f.seekp(offset);
      f.write(reinterpret_cast<const char*>(&dim), sizeof(dim));
    }
  }
  const std::string msg = error_of<DataError>([&] { read_nifti(p); });
  EXPECT_NE(msg.find(p.string() + ": declares shape [30000, 30000, 30000]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory available"), std::string::npos) << msg;
}

}  // namespace
}  // namespace u3d
