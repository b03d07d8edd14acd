// io/dicom/dicom_grid.h: contours filled even-odd (holes stay holes, edges included, off-grid polygons
// counted) and dose resampled trilinearly in patient coordinates.
#include "u3d/io/dicom/dicom_grid.h"

#include <gtest/gtest.h>

namespace u3d {
namespace {

DicomGrid grid(Shape3 shape) {
  DicomGrid g;
  g.shape = shape;
  g.origin = {10.0, 20.0, -5.0};
  g.row_dir = {1, 0, 0};
  g.col_dir = {0, 1, 0};
  g.normal = {0, 0, 1};
  g.spacing = {2.0, 1.0, 0.5};  // slice, row, column
  return g;
}

// A square of voxel corners (i0, j0)-(i1, j1) on slice k, in patient coordinates.
std::vector<Vec3> square(const DicomGrid& g, double i0, double j0, double i1, double j1, int64_t k) {
  std::vector<Vec3> out;
  for (const auto& [i, j] : std::vector<std::pair<double, double>>{{i0, j0}, {i1, j0}, {i1, j1}, {i0, j1}}) {
    out.push_back(g.world(static_cast<double>(k), j, i));
  }
  return out;
}

TEST(DicomGrid, ContoursFillEvenOddWithEdgesAndHoles) {
  const DicomGrid g = grid({4, 12, 12});
  RtStructure s{"ring", {square(g, 1, 1, 10, 10, 2), square(g, 4, 4, 7, 7, 2), square(g, 0, 0, 3, 3, 9)}};
  int64_t off = 0;
  const torch::Tensor m = rasterize_structure(s, g, &off);
  EXPECT_EQ(off, 1);                       // slice 9 of 4
  EXPECT_EQ(m[2][1][1].item<int>(), 1);    // a corner, on the edge
  EXPECT_EQ(m[2][10][10].item<int>(), 1);  // the far corner
  EXPECT_EQ(m[2][5][5].item<int>(), 0);    // inside the hole
  EXPECT_EQ(m[2][4][4].item<int>(), 1);    // the hole's edge, drawn as a contour
  EXPECT_EQ(m[2][0][0].item<int>(), 0);
  EXPECT_EQ(m[1].sum().item<int64_t>(), 0);
  EXPECT_EQ(m[2].sum().item<int64_t>(), 100 - 4);  // 10x10 minus the hole's 2x2 interior
}

TEST(DicomGrid, DoseIsResampledTrilinearlyAndZeroOutside) {
  const DicomGrid g = grid({3, 4, 5});
  RtDose d;
  d.origin = {10.0, 20.0, -5.0};
  d.row_dir = {1, 0, 0};
  d.col_dir = {0, 1, 0};
  d.normal = {0, 0, 1};
  d.pixel_spacing = {2.0, 1.0};
  d.frame_offsets = {0.0, 1.0, 4.0};  // uneven frames
  const auto f = torch::tensor({0.0, 1.0, 4.0}, torch::kFloat32).view({-1, 1, 1});
  const auto r = torch::arange(3, torch::kFloat32).view({1, -1, 1}) * 2;
  const auto c = torch::arange(3, torch::kFloat32).view({1, 1, -1});
  d.gy = (f * 3 + r + c * 0.5).contiguous();  // 3 z + y + 0.5 x in mm from the origin
  int64_t outside = 0;
  const torch::Tensor out = resample_dose(d, g, &outside);
  // voxel (k, j, i) at z = 2k, y = j, x = 0.5 i: all inside the dose grid (z <= 4, y <= 4, x <= 2).
  EXPECT_NEAR(out[1][3][3].item<float>(), 3 * 2 + 3 + 0.5 * 1.5, 1e-5);
  EXPECT_NEAR(out[2][3][4].item<float>(), 3 * 4 + 3 + 0.5 * 2, 1e-5);
  EXPECT_EQ(outside, 0);
  DicomGrid wide = g;
  wide.shape = {4, 4, 5};  // slice 3 at z = 6: beyond the last frame
  EXPECT_EQ(resample_dose(d, wide, &outside)[3].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(outside, 20);
}

}  // namespace
}  // namespace u3d
