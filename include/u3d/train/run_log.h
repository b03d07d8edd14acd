// What a run reports as it goes: the console and train.log lines (banner, progress inside an epoch,
// the epoch summary, the end), metrics.csv (one row per epoch) and, with logging.step_log,
// steps.csv (one row per step). The place epoch-level outputs (plots, TensorBoard) hook into.
//
// metrics.csv columns: epoch, step, lr, train_loss, val_loss, <task metric>, [val_pseudo_dice,
// val_pseudo_dice_ema], [val_dose_score, val_dvh_score], best, epoch_seconds, data_seconds,
// data_share, samples_per_second, skipped_steps (bracketed ones when that validation runs).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>

#include "u3d/core/logging.h"
#include "u3d/core/run.h"
#include "u3d/train/checkpoint.h"
#include "u3d/train/resolve.h"
#include "u3d/train/validator.h"

namespace u3d {

struct EpochStats {
  double train_loss = 0;
  double seconds = 0;       // training time of the whole epoch (before a resume too), s
  double data_seconds = 0;  // the part of it the loop waited for batches (BatchLoader::wait_seconds)
  int64_t samples = 0;
  int64_t skipped = 0;  // steps skipped for a non-finite loss or gradient norm
};

// The numbers of one progress line inside an epoch.
struct Progress {
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch
  double loss = 0, lr = 0;
  double samples_per_second = 0;
  double data_share = 0;    // waiting for batches / elapsed
  double seconds_left = 0;  // estimated, to the epoch's end
  int64_t skipped = 0;      // steps skipped (NaN/Inf) so far in the epoch
};

class RunLog {
 public:
  RunLog(const ResolvedConfig& rc, const RunPaths& paths);
  // metrics.csv (and steps.csv): fresh files, or, after a resume, kept through the checkpoint's
  // epoch and global step (rows written after it are dropped and written again).
  void begin(const std::optional<TrainState>& resumed);
  void banner(const Runtime& runtime, int64_t parameters, const std::string& loss) const;
  // Whether logging.progress_seconds have passed since the last progress line (or the epoch start).
  bool progress_due() const;
  void progress(const Progress& p);
  void start_epoch() { last_progress_ = std::chrono::steady_clock::now(); }
  // steps.csv row (logging.step_log): one host read of the loss and the skip flag.
  void step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, double lr, const torch::Tensor& loss,
            const torch::Tensor& found_inf);
  bool logs_steps() const { return step_csv_ != nullptr; }
  // The metrics row and the epoch summary line of `epoch`, which ended at `global_step`; `lr` is
  // its last step's learning rate.
  void epoch(int64_t epoch, int64_t global_step, const EpochStats& train, const std::optional<ValStats>& val,
             bool improved, double lr);
  void done(const TrainState& state) const;

 private:
  const ResolvedConfig& rc_;
  const RunPaths& paths_;
  std::unique_ptr<MetricsCsv> csv_;
  std::unique_ptr<MetricsCsv> step_csv_;  // logging.step_log
  std::chrono::steady_clock::time_point last_progress_;
};

}  // namespace u3d
