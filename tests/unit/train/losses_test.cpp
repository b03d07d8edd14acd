#include <gtest/gtest.h>

#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

TEST(Losses, L1AndMseByHand) {
  const auto p = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 2, 2});
  const auto t = torch::tensor({1.0f, 0.0f, 4.0f, 8.0f}).view({1, 1, 1, 2, 2});
  EXPECT_FLOAT_EQ(u3d::l1_loss(p, t).item<float>(), (0 + 2 + 1 + 4) / 4.0f);
  EXPECT_FLOAT_EQ(u3d::mse_loss(p, t).item<float>(), (0 + 4 + 1 + 16) / 4.0f);
}

TEST(Losses, MaskedLossesCountOnlyMaskedVoxels) {
  const auto p = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 2, 2});
  const auto t = torch::tensor({1.0f, 0.0f, 4.0f, 8.0f}).view({1, 1, 1, 2, 2});
  const auto m = torch::tensor({0.0f, 1.0f, 1.0f, 0.0f}).view({1, 1, 1, 2, 2});
  EXPECT_FLOAT_EQ(u3d::masked_l1_loss(p, t, m).item<float>(), (2 + 1) / 2.0f);
  EXPECT_FLOAT_EQ(u3d::masked_mse_loss(p, t, m).item<float>(), (4 + 1) / 2.0f);
  EXPECT_FLOAT_EQ(u3d::masked_l1_loss(p, t, torch::zeros_like(m)).item<float>(), 0.0f);  // empty mask
}

TEST(Losses, SoftDiceByHand) {
  // Two voxels, two classes; logits chosen so that softmax gives p(class 1) = 0.75 and 0.25.
  const double l = std::log(3.0);
  const auto logits = torch::tensor({0.0, 0.0, l, -l}, torch::kFloat).view({1, 2, 1, 1, 2});
  const auto labels = torch::tensor({1, 0}, torch::kLong).view({1, 1, 1, 2});
  // class 1: inter = 0.75, sum p = 1.0, sum y = 1 -> dice = (1.5 + s) / (2 + s)
  const double s = 1e-5;
  EXPECT_NEAR(u3d::soft_dice_loss(logits, labels, s).item<double>(), 1.0 - (1.5 + s) / (2.0 + s), 1e-6);
  // cross entropy: mean(-log 0.75, -log 0.75)
  EXPECT_NEAR(u3d::cross_entropy_loss(logits, labels).item<double>(), -std::log(0.75), 1e-6);
  EXPECT_NEAR(u3d::dice_ce_loss(logits, labels).item<double>(), -std::log(0.75) + 1.0 - (1.5 + 1e-5) / (2.0 + 1e-5),
              1e-6);
}

TEST(Losses, PerfectSegmentationHasNearZeroLoss) {
  const auto labels = torch::randint(0, 3, {2, 4, 4, 4}, torch::kLong);
  const auto logits = torch::one_hot(labels, 3).movedim(-1, 1).to(torch::kFloat) * 50.0;
  EXPECT_LT(u3d::dice_ce_loss(logits, labels).item<float>(), 1e-4);
}

TEST(Losses, ResolveAutoAndRejectMismatches) {
  EXPECT_EQ(resolve_loss(LossKind::kAuto, Task::kDose, true), LossKind::kMaskedL1);
  EXPECT_EQ(resolve_loss(LossKind::kAuto, Task::kDose, false), LossKind::kL1);
  EXPECT_EQ(resolve_loss(LossKind::kAuto, Task::kSegmentation, false), LossKind::kDiceCe);
  EXPECT_THROW(resolve_loss(LossKind::kDiceCe, Task::kDose, true), ConfigError);
  EXPECT_THROW(resolve_loss(LossKind::kL1, Task::kSegmentation, true), ConfigError);
  EXPECT_THROW(resolve_loss(LossKind::kMaskedL1, Task::kDose, false), ConfigError);
}

TEST(Losses, LossObjectDispatches) {
  const auto p = torch::ones({1, 1, 2, 2, 2});
  const auto t = torch::zeros({1, 1, 2, 2, 2});
  EXPECT_FLOAT_EQ(Loss(LossKind::kL1)(p, t, torch::Tensor()).item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(Loss(LossKind::kMse)(p * 2, t, torch::Tensor()).item<float>(), 4.0f);
}

}  // namespace
}  // namespace u3d
