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

// Validation keeps the per-case values on the device and reads them once: the tensor forms equal
// the host ones bit for bit (the CPU run's val metrics do not change).
TEST(Metrics, DeviceFormsEqualTheHostValues) {
  torch::manual_seed(5);
  const auto p = torch::rand({4, 5, 6}) * 70, t = torch::rand({4, 5, 6}) * 70;
  const auto m = (torch::rand({1, 4, 5, 6}) > 0.3).to(torch::kUInt8);
  for (const auto& mask : {m, torch::Tensor(), torch::zeros_like(m)}) {
    const torch::Tensor v = masked_mae_tensor(p, t, mask);
    EXPECT_EQ(v.dim(), 0);
    EXPECT_EQ(v.scalar_type(), torch::kDouble);
    const double host = masked_mae(p, t, mask);
    if (std::isnan(host)) {
      EXPECT_TRUE(std::isnan(v.item<double>()));
    } else {
      EXPECT_EQ(v.item<double>(), host);
    }
  }
  const auto pred = torch::randint(0, 4, {4, 5, 6}, torch::kUInt8),
             ref = torch::randint(0, 3, {4, 5, 6}, torch::kUInt8);
  const torch::Tensor d = dice_per_class_tensor(pred, ref, 5);  // class 4 absent from both
  const auto host = dice_per_class(pred, ref, 5);
  ASSERT_EQ(d.numel(), 4);
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(d[k].item<double>(), host[static_cast<size_t>(k)]) << k;
  EXPECT_TRUE(std::isnan(d[3].item<double>()));
  EXPECT_EQ(dice_per_class_tensor(pred, ref, 1).numel(), 0);
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
