// NIfTI test data written with nifticlib directly (not through u3d's NiftiWriter), so reader,
// importer and prediction tests do not trust the code they test; and small nnU-Net raw folders.
#pragma once
#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d::test {

namespace fs = std::filesystem;

// One NIfTI file: voxels and the header fields that carry geometry.
struct TestNifti {
  torch::Tensor data;                        // (D, H, W) = file (k, j, i); uint8/int16/int32/float32
  std::array<double, 3> pixdim = {1, 1, 1};  // dx, dy, dz (mm) = spacing along W, H, D
  int qform_code = 1;
  std::array<double, 3> quatern = {0, 0, 0};  // b, c, d
  std::array<double, 3> qoffset = {0, 0, 0};  // x, y, z (mm)
  double qfac = 1;
  int sform_code = 0;
  std::array<double, 12> srow{};  // rows x, y, z of the sform (used when sform_code > 0)
  int xyz_units = 2;              // NIFTI_UNITS_MM
  double scl_slope = 0, scl_inter = 0;
  int nt = 1;  // volumes along dim 4
};

// An oblique geometry with qfac -1, an offset and a different sform: nothing about it is default.
TestNifti oblique(torch::Tensor data);

void write_test_nifti(const fs::path& path, const TestNifti& v);

// The header of a NIfTI file as nifticlib reads it, for comparisons.
struct HeaderFields {
  std::array<int64_t, 3> dims{};  // nx, ny, nz
  std::array<double, 3> pixdim{};
  int qform_code = 0, sform_code = 0, xyz_units = 0, datatype = 0;
  std::array<double, 7> quatern{};  // b, c, d, qx, qy, qz, qfac
  std::array<double, 16> sto_xyz{};
  std::array<double, 16> qto_xyz{};
};
HeaderFields read_header_fields(const fs::path& path);
// EXPECTs that `output` (a uint8 label file) has `input`'s grid and header: dims, pixdim, qform and
// sform (codes, parameters, matrices) and units, as read by nifticlib.
void expect_same_label_geometry(const fs::path& input, const fs::path& output);

// nnU-Net raw folder <dir>/Dataset001_Test: `cases` labelled cases (plus `test_cases` in imagesTs)
// of `shape` (D, H, W), two channels "CT" (int16, HU-like) and "T2" (float32), labels
// background/liver/tumour (0, 1, 2) from the segmentation phantom, each case with its own oblique
// geometry. Returns the dataset folder.
fs::path make_nnunet_raw(const fs::path& dir, int cases, const Shape3& shape, int test_cases = 0,
                         const std::string& ending = ".nii.gz");
// The voxels written for case i of make_nnunet_raw: image (2, D, H, W) float32, labels (D, H, W) uint8.
std::pair<torch::Tensor, torch::Tensor> nnunet_raw_case(int index, const Shape3& shape);

}  // namespace u3d::test
