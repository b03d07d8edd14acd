// predict/cascade_data.h's previous_stage_channels: the first stage's segmentation as one 0/1
// channel per foreground class, on the full-resolution grid.
#include <gtest/gtest.h>

#include "u3d/predict/cascade_data.h"

namespace u3d {
namespace {

torch::Tensor scores_of(const torch::Tensor& labels, int64_t k) {
  return torch::one_hot(labels.to(torch::kLong), k).permute({3, 0, 1, 2}).to(torch::kFloat);
}

TEST(CascadeData, SameGridGivesTheForegroundClassesOneHot) {
  const torch::Tensor labels = torch::randint(0, 3, {3, 4, 5}, torch::kLong);
  const torch::Tensor c = previous_stage_channels(scores_of(labels, 3), {3, 4, 5});
  ASSERT_EQ(c.sizes(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(c.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(c[0], (labels == 1).to(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(c[1], (labels == 2).to(torch::kUInt8)));
}

TEST(CascadeData, TwiceFinerGridGivesEachVoxelItsCoarseVoxelsLabel) {
  // Trilinear at the voxel centres (align_corners false) weighs the nearest coarse voxel 3/4 on each
  // axis for an exact factor of 2: where the labels change along at most two axes, the nearest one
  // weighs at least 9/16 and the arg-max is the label of the coarse voxel each fine one lies in.
  // (Where three meet it may not be: the resampled probabilities smooth, as nnU-Net's do.)
  const torch::Tensor w = torch::arange(4).view({1, 1, 4}), h = torch::arange(3).view({1, 3, 1});
  const torch::Tensor labels = torch::where(h >= 1, torch::where(w >= 2, 2, 1), 0).expand({2, 3, 4}).contiguous();
  const torch::Tensor c = previous_stage_channels(scores_of(labels, 3), {4, 6, 8});
  const torch::Tensor up = labels.repeat_interleave(2, 0).repeat_interleave(2, 1).repeat_interleave(2, 2);
  EXPECT_TRUE(torch::equal(c[0], (up == 1).to(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(c[1], (up == 2).to(torch::kUInt8)));
}

TEST(CascadeData, ProbabilitiesAreResampledBeforeTheArgMax) {
  // A voxel whose class-2 probability (0.45) is below class 1's (0.55) is class 1, not 2.
  torch::Tensor p = torch::zeros({3, 1, 1, 1});
  p[1] = 0.55;
  p[2] = 0.45;
  const torch::Tensor c = previous_stage_channels(p, {2, 2, 2});
  EXPECT_EQ(c[0].sum().item<int64_t>(), 8);
  EXPECT_EQ(c[1].sum().item<int64_t>(), 0);
}

}  // namespace
}  // namespace u3d
