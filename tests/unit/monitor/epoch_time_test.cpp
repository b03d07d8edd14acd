// The GPU busy share of an epoch and the note that explains a low one (monitor/epoch_stats.h).
#include <gtest/gtest.h>

#include <cmath>

#include "u3d/monitor/epoch_stats.h"

namespace u3d {
namespace {

TEST(EpochTime, BusyShareIsGpuTimeOverTrainingValidationAndCheckpointWrites) {
  EpochTime t{/*gpu=*/6, /*training=*/8, /*data_wait=*/1, /*checkpoint=*/0.5};
  EXPECT_DOUBLE_EQ(epoch_wall_seconds(t, /*val_seconds=*/1.5), 10.0);
  EXPECT_DOUBLE_EQ(gpu_busy_share(t, 1.5), 0.6);
  EXPECT_DOUBLE_EQ(gpu_busy_share(t, 0.0), 6.0 / 8.5);
  t.gpu = 50;  // events that overlap a clock step never make it more than the whole
  EXPECT_DOUBLE_EQ(gpu_busy_share(t, 1.5), 1.0);
}

TEST(EpochTime, OnTheCpuTheShareIsUnknownNotZero) {
  EpochTime t;  // gpu NaN: no CUDA events
  t.training = 8;
  EXPECT_TRUE(std::isnan(gpu_busy_share(t, 1)));
  EXPECT_EQ(gpu_idle_note(t, 1), "");
}

TEST(EpochTime, ALowShareSaysWhatTheRestOfTheEpochWas) {
  EpochTime t{/*gpu=*/4, /*training=*/8, /*data_wait=*/3, /*checkpoint=*/0.5};
  // wall 10 s: GPU 40%, data 30%, validation 15%, checkpoints 5%, host work 8 - 4 - 3 = 1 s (10%).
  EXPECT_EQ(gpu_idle_note(t, 1.5),
            "GPU idle 60% of 10.0 s: data wait 30%, validation 15%, checkpoint writes 5%, host work between steps 10%");
  t.gpu = 8.5;  // 85%: not low, no note
  EXPECT_EQ(gpu_idle_note(t, 1.5), "");
}

}  // namespace
}  // namespace u3d
