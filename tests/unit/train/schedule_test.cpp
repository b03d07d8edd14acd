#include <gtest/gtest.h>

#include <cmath>

#include "u3d/train/schedule.h"

namespace u3d {
namespace {

TrainingConfig training(ScheduleKind kind, int64_t warmup) {
  TrainingConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.lr_schedule = kind;
  t.warmup_steps = warmup;
  t.poly_power = 2.0;
  return t;
}

TEST(Schedule, WarmupIsLinear) {
  const LrSchedule s(training(ScheduleKind::kConstant, 4), 100);
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(50), 1.0);
}

TEST(Schedule, CosineGoesFromLrToMinLr) {
  const LrSchedule s(training(ScheduleKind::kCosine, 0), 101);
  EXPECT_DOUBLE_EQ(s.at(0), 1.0);
  EXPECT_NEAR(s.at(50), 0.1 + 0.45 * (1 + std::cos(M_PI * 50.0 / 101.0)), 1e-12);
  EXPECT_NEAR(s.at(101), 0.1, 1e-12);
}

TEST(Schedule, PolyDecays) {
  const LrSchedule s(training(ScheduleKind::kPoly, 10), 110);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), std::pow(0.5, 2.0), 1e-12);
  EXPECT_NEAR(s.at(110), 0.0, 1e-12);
}

}  // namespace
}  // namespace u3d
