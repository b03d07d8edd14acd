// Outlines of 2D masks (io/dicom/mask_contours.h): filling every loop even-odd at the pixel centres gives
// the mask back exactly (with the default inset and with none), for random masks, holes and pixels
// touching at a corner; loops are closed polygons on half-pixel midpoints (inset 0) with collinear
// points dropped, inset vertices round to inside pixels.
#include <gtest/gtest.h>

#include <cmath>

#include "u3d/io/dicom/mask_contours.h"

namespace u3d {
namespace {

// Even-odd fill at the pixel centres (ray casting along +column), independent of the tracer.
torch::Tensor fill(const std::vector<Polygon2d>& loops, int64_t h, int64_t w) {
  torch::Tensor out = torch::zeros({h, w}, torch::kUInt8);
  auto a = out.accessor<uint8_t, 2>();
  for (int64_t r = 0; r < h; ++r) {
    for (int64_t c = 0; c < w; ++c) {
      bool inside = false;
      for (const auto& loop : loops) {
        for (size_t i = 0, j = loop.size() - 1; i < loop.size(); j = i++) {
          const auto& p = loop[i];
          const auto& q = loop[j];
          if ((p[0] > r) != (q[0] > r) && c < (q[1] - p[1]) * (r - p[0]) / (q[0] - p[0]) + p[1]) inside = !inside;
        }
      }
      a[r][c] = inside;
    }
  }
  return out;
}

void expect_round_trip(const torch::Tensor& mask, const char* what) {
  EXPECT_TRUE(torch::equal(fill(mask_contours(mask), mask.size(0), mask.size(1)), mask.to(torch::kUInt8))) << what;
  const auto loops = mask_contours(mask, /*inset=*/0);
  EXPECT_TRUE(torch::equal(fill(loops, mask.size(0), mask.size(1)), mask.to(torch::kUInt8))) << what << ", inset 0";
  for (const auto& loop : loops) {
    ASSERT_GE(loop.size(), 4u) << what;
    for (const auto& [r, c] : loop) {
      EXPECT_EQ(std::fmod(r * 2, 1.0), 0.0) << what << ": points lie on the half-pixel grid";
      EXPECT_NE(std::fmod(r, 1.0) == 0, std::fmod(c, 1.0) == 0) << what << ": on an edge between two pixels";
    }
  }
}

TEST(MaskContours, RandomMasksFillBackExactly) {
  torch::manual_seed(5);
  for (int i = 0; i < 20; ++i) {
    const torch::Tensor m = torch::rand({17, 23}) < (0.2 + 0.03 * i);
    expect_round_trip(m.to(torch::kUInt8), "random mask");
  }
}

TEST(MaskContours, AHoleIsALoopOfItsOwn) {
  torch::Tensor ring = torch::zeros({9, 9}, torch::kUInt8);
  ring.slice(0, 1, 8).slice(1, 1, 8).fill_(1);
  ring.slice(0, 3, 6).slice(1, 3, 6).fill_(0);
  const auto loops = mask_contours(ring);
  EXPECT_EQ(loops.size(), 2u);
  expect_round_trip(ring, "ring");
  // A square's outline keeps only its corners' neighbours: 8 points (corners are cut diagonally).
  torch::Tensor square = torch::zeros({6, 6}, torch::kUInt8);
  square.slice(0, 1, 5).slice(1, 1, 5).fill_(1);
  ASSERT_EQ(mask_contours(square).size(), 1u);
  EXPECT_EQ(mask_contours(square)[0].size(), 8u);
  // Inset: every vertex 0.1 pixel from its midpoint towards the inside, so it rounds to an inside pixel.
  const auto square_loops = mask_contours(square);
  for (const auto& [r, c] : square_loops[0]) {
    const int64_t ri = std::lround(r), ci = std::lround(c);
    EXPECT_EQ(square[ri][ci].item<int64_t>(), 1) << r << ", " << c;
    EXPECT_NEAR(std::abs(r - ri) + std::abs(c - ci), 0.4, 1e-9) << r << ", " << c;
  }
}

TEST(MaskContours, PixelsTouchingAtACornerAreApartAndBordersAreClosed) {
  torch::Tensor diagonal = torch::zeros({4, 4}, torch::kUInt8);
  diagonal[1][1] = 1;
  diagonal[2][2] = 1;
  EXPECT_EQ(mask_contours(diagonal).size(), 2u);
  expect_round_trip(diagonal, "diagonal pair");
  expect_round_trip(torch::ones({5, 7}, torch::kUInt8), "full image: closed along the border");
  EXPECT_TRUE(mask_contours(torch::zeros({5, 5}, torch::kUInt8)).empty());
}

}  // namespace
}  // namespace u3d
