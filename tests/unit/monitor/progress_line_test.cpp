// The terminal status line of logging.progress bar (monitor/status_line.h): what it shows and its width.
#include <gtest/gtest.h>

#include "u3d/monitor/status_line.h"

namespace u3d {
namespace {

Progress sample() {
  Progress p;
  p.epoch = 3;
  p.step = 120;
  p.loss = 0.4521;
  p.lr = 1e-3;
  p.steps_per_second = 3.214;
  p.data_share = 0.031;
  p.seconds_left = 45;
  p.run_seconds_left = 4 * 3600 + 10 * 60 + 7;
  p.gpu_bytes = int64_t{44} << 30;
  p.gpu_total = int64_t{80} << 30;
  return p;
}

TEST(ProgressLine, ShowsEveryFieldOfTheStatusLine) {
  const std::string line = progress_bar_line(sample(), /*epochs=*/100, /*steps=*/250, /*columns=*/400);
  EXPECT_EQ(line,
            "epoch 3/100 [#########-----------]  48% 120/250 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210 | "
            "lr 1.00e-03 | data 3% | GPU 44.0/80.0 GiB");
}

TEST(ProgressLine, CpuRunsHaveNoGpuPartAndSkippedStepsAreShown) {
  Progress p = sample();
  p.gpu_bytes = -1;
  p.skipped = 2;
  const std::string line = progress_bar_line(p, 100, 250, 400);
  EXPECT_EQ(line.find("GPU"), std::string::npos);
  EXPECT_NE(line.find("| 2 skipped"), std::string::npos) << line;
}

TEST(ProgressLine, NarrowTerminalsDropTheBarThenLrAndDataWaitThenGpuMemory) {
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 120),
            "epoch 3/100  48% 120/250 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210 | lr 1.00e-03 | data 3% | "
            "GPU 44.0/80.0 GiB");
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 100),
            "epoch 3/100  48% 120/250 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210 | GPU 44.0/80.0 GiB");
  // 80 columns: the step, speed, both ETAs and the loss stay.
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 80),
            "epoch 3/100  48% 120/250 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210");
}

TEST(ProgressLine, NeverWiderThanTheTerminal) {
  for (int columns : {20, 60}) {  // narrower than the shortest form: cut
    const std::string line = progress_bar_line(sample(), 100, 250, columns);
    EXPECT_EQ(static_cast<int>(line.size()), columns - 1);  // the last column stays free: no wrap
  }
  for (int columns : {77, 80, 101, 119, 150}) {
    EXPECT_LT(static_cast<int>(progress_bar_line(sample(), 100, 250, columns).size()), columns);
  }
}

TEST(ProgressLine, ClockText) {
  EXPECT_EQ(clock_text(0), "0:00");
  EXPECT_EQ(clock_text(59.6), "1:00");
  EXPECT_EQ(clock_text(3599), "59:59");
  EXPECT_EQ(clock_text(3600 + 61), "1:01:01");
  EXPECT_EQ(clock_text(-1), "--");
  EXPECT_EQ(clock_text(std::nan("")), "--");
}

}  // namespace
}  // namespace u3d
