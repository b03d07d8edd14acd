// The terminal status line of logging.progress bar (monitor/status_line.h): what it shows in each
// phase, tqdm's conventions for times and rates, and its width.
#include <gtest/gtest.h>

#include "u3d/monitor/status_line.h"

namespace u3d {
namespace {

Progress sample() {
  Progress p;
  p.epoch = 3;
  p.step = 120;
  p.elapsed = 37.4;
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

TEST(ProgressLine, ShowsThePhaseAndEveryFieldOfTheStatusLine) {
  const std::string line = progress_bar_line(sample(), /*epochs=*/100, /*steps=*/250, /*columns=*/400);
  EXPECT_EQ(line,
            "training epoch 3/100 [#########-----------]  48% 120/250 [00:37<00:45,  3.21it/s] | run ETA 4:10:07 | "
            "loss 0.45210 | lr 1.00e-03 | data 3% | GPU 44.0/80.0 GiB");
}

TEST(ProgressLine, ShowsTheGpuBusyShareOnlyOnAGpu) {
  Progress p = sample();
  p.gpu_busy = 0.974;
  EXPECT_NE(progress_bar_line(p, 100, 250, 400).find(" | data 3% | gpu 97% | GPU 44.0/80.0 GiB"), std::string::npos)
      << progress_bar_line(p, 100, 250, 400);
  p.gpu_busy = -1;  // the CPU: no share at all, not "gpu 0%"
  EXPECT_EQ(progress_bar_line(p, 100, 250, 400).find("gpu "), std::string::npos);
}

TEST(ProgressLine, ReachesNOfNAtTheLastStep) {
  Progress p = sample();
  p.step = 250;
  p.seconds_left = 0;
  const std::string line = progress_bar_line(p, 100, 250, 400);
  EXPECT_NE(line.find("[####################] 100% 250/250 [00:37<00:00,  3.21it/s]"), std::string::npos) << line;
}

TEST(ProgressLine, ValidatingShowsCasesWithTheirRateAndTheRunEta) {
  Progress p;
  p.phase = Phase::kValidating;
  p.epoch = 3;
  p.step = 2;
  p.elapsed = 3.1;
  p.steps_per_second = 2 / 3.1;  // below 1 it/s: tqdm's s/it
  p.seconds_left = 4.6;
  p.run_seconds_left = 125;
  p.gpu_bytes = -1;
  EXPECT_EQ(progress_bar_line(p, 100, /*cases=*/5, 400),
            "validating epoch 3/100 [########------------]  40% 2/5 [00:03<00:04,  1.55s/it] | run ETA 2:05");
}

TEST(ProgressLine, CheckpointingNamesTheEpochAndTheRunEta) {
  Progress p;
  p.phase = Phase::kCheckpointing;
  p.epoch = 7;
  p.run_seconds_left = 61;
  EXPECT_EQ(progress_bar_line(p, 100, 0, 400), "checkpointing epoch 7/100 | run ETA 1:01");
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
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 140),
            "training epoch 3/100  48% 120/250 [00:37<00:45,  3.21it/s] | run ETA 4:10:07 | loss 0.45210 | "
            "lr 1.00e-03 | data 3% | GPU 44.0/80.0 GiB");
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 120),
            "training epoch 3/100  48% 120/250 [00:37<00:45,  3.21it/s] | run ETA 4:10:07 | loss 0.45210 | "
            "GPU 44.0/80.0 GiB");
  // 80 columns: the phase, the epoch, the step, tqdm's times and rate, the run's ETA and the loss stay.
  EXPECT_EQ(progress_bar_line(sample(), 100, 250, 80),
            "training epoch 3/100 120/250 [00:37<00:45,  3.21it/s] ETA 4:10:07 loss 0.45210");
}

TEST(ProgressLine, NeverWiderThanTheTerminal) {
  for (int columns : {20, 60}) {  // narrower than the shortest form: cut
    const std::string line = progress_bar_line(sample(), 100, 250, columns);
    EXPECT_EQ(static_cast<int>(line.size()), columns - 1);  // the last column stays free: no wrap
  }
  for (int columns : {79, 80, 101, 119, 150}) {
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

// tqdm's format_interval and rate_fmt (tqdm/std.py): two-digit minutes under an hour, truncated
// seconds; it/s at or above one iteration per second, s/it below, both "{:5.2f}".
TEST(ProgressLine, TimesAndRatesFollowTqdm) {
  EXPECT_EQ(tqdm_interval(0), "00:00");
  EXPECT_EQ(tqdm_interval(59.9), "00:59");
  EXPECT_EQ(tqdm_interval(60), "01:00");
  EXPECT_EQ(tqdm_interval(6160), "1:42:40");
  EXPECT_EQ(tqdm_interval(238113), "66:08:33");
  EXPECT_EQ(tqdm_interval(-1), "?");
  EXPECT_EQ(tqdm_rate(3.214), " 3.21it/s");
  EXPECT_EQ(tqdm_rate(1.0), " 1.00it/s");
  EXPECT_EQ(tqdm_rate(123.456), "123.46it/s");
  EXPECT_EQ(tqdm_rate(1 / 1.01), " 1.01s/it");
  EXPECT_EQ(tqdm_rate(0.01), "100.00s/it");
  EXPECT_EQ(tqdm_rate(0), "?it/s");
  EXPECT_EQ(tqdm_rate(std::nan("")), "?it/s");
}

}  // namespace
}  // namespace u3d
