#include <gtest/gtest.h>

#include <cmath>

#include "u3d/evaluate/metrics.h"

namespace u3d {
namespace {

TEST(Metrics, MaskedMaeByHand) {
  const auto p = torch::tensor({10.0f, 20.0f, 30.0f, 40.0f}).view({1, 2, 2});
  const auto t = torch::tensor({12.0f, 20.0f, 35.0f, 0.0f}).view({1, 2, 2});
  const auto m = torch::tensor({1, 1, 1, 0}, torch::kUInt8).view({1, 2, 2});
  EXPECT_DOUBLE_EQ(masked_mae(p, t, m), (2.0 + 0.0 + 5.0) / 3.0);
  EXPECT_DOUBLE_EQ(masked_mae(p, t, torch::Tensor()), (2.0 + 0.0 + 5.0 + 40.0) / 4.0);
  EXPECT_TRUE(std::isnan(masked_mae(p, t, torch::zeros_like(m))));
}

TEST(Metrics, DiceByHand) {
  const auto pred = torch::tensor({1, 1, 2, 0, 0, 0}, torch::kUInt8).view({1, 2, 3});
  const auto ref = torch::tensor({1, 0, 2, 2, 0, 0}, torch::kUInt8).view({1, 2, 3});
  const auto d = dice_per_class(pred, ref, 4);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_DOUBLE_EQ(d[0], 2.0 * 1 / (2 + 1));  // class 1: pred {0,1}, ref {0}
  EXPECT_DOUBLE_EQ(d[1], 2.0 * 1 / (1 + 2));  // class 2: pred {2}, ref {2,3}
  EXPECT_TRUE(std::isnan(d[2]));              // class 3 absent from both
  EXPECT_DOUBLE_EQ(nan_mean(d), 2.0 / 3.0);
}

TEST(Metrics, ImprovementRules) {
  const double nan = std::nan("");
  EXPECT_TRUE(is_improvement(1.0, nan, false));
  EXPECT_FALSE(is_improvement(nan, 1.0, false));
  EXPECT_FALSE(is_improvement(nan, nan, true));
  EXPECT_TRUE(is_improvement(0.5, 1.0, false));
  EXPECT_FALSE(is_improvement(0.5, 1.0, true));
  EXPECT_FALSE(is_improvement(std::numeric_limits<double>::infinity(), 1.0, true));
  EXPECT_EQ(task_metric(Task::kDose).name, "val_mae");
  EXPECT_TRUE(task_metric(Task::kSegmentation).higher_is_better);
}

}  // namespace
}  // namespace u3d
