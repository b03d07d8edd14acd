// What a run reports as it goes: the console and train.log lines (banner, progress inside an epoch,
// the epoch summary, the end), metrics.csv (one row per epoch) and, with logging.step_log,
// steps.csv (one row per step), and the epoch-level views of them: <run>/progress.png and .svg
// (logging.plot, monitor/progress_plot.h) and TensorBoard event files (logging.tensorboard,
// monitor/tensorboard.h: tags epoch/<metrics.csv column> and step/train_loss, step/lr at the global
// step; images progress and val/input, val/target, val/prediction). A plot or TensorBoard write
// that fails is a warning, never the end of the run.
//
// metrics.csv columns: epoch, step, lr, train_loss, [loss_<term> per term of a training.loss list,
// unweighted], val_loss, <task metric>, [val_pseudo_dice,
// val_pseudo_dice_ema, dice_<class> per foreground class (its pseudo-Dice; the class name, or its
// index when unnamed)], [val_dose_score, val_dvh_score], best, epoch_seconds, val_seconds,
// data_seconds, data_share, gpu_busy, samples_per_second, skipped_steps (bracketed ones when that
// validation runs). epoch_seconds is the training steps' time, val_seconds the validation's;
// gpu_busy the GPU time of the steps over the epoch's wall time (EpochTime, monitor/epoch_stats.h),
// empty on the CPU.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/logging.h"
#include "u3d/core/run.h"
#include "u3d/monitor/epoch_stats.h"
#include "u3d/monitor/metrics_csv.h"
#include "u3d/monitor/status_line.h"

namespace u3d {

class TensorBoardWriter;

// What the run log needs of the run's resolved config (train/run_monitoring.h makes it from a
// ResolvedConfig).
struct RunLogSettings {
  Config cfg;                      // the resolved config: logging, epochs, loss terms, experiment name
  std::string metric_name;         // the task metric's metrics.csv column (val_mae | val_dice)
  std::string monitor_name;        // checkpoint.monitor's column, e.g. "val_dose_score"
  bool validates_patches = false;  // val_pseudo_dice and val_pseudo_dice_ema columns
  bool scores_dose = false;        // val_dose_score and val_dvh_score columns
  bool labels = false;             // segmentation: the previews on the label scale
  int64_t num_classes = 0;         // labels: 0 .. num_classes - 1
  // Segmentation: the name of each class 0 .. num_classes - 1 (empty or short: indices); with patch
  // validation each foreground class has a dice_<name> column, an epoch/dice_<name> TensorBoard scalar.
  std::vector<std::string> class_names;
  // Whether whole volumes are validated after an epoch (the run's ETA counts those validations).
  std::function<bool(int64_t epoch)> full_validation_due;
  int64_t steps_per_epoch = 0;
  int64_t world_size = 1;  // data-parallel processes
};

// Where the run stands (from the training state, train/run_monitoring.h): at a resume, and at the end.
struct RunPosition {
  int64_t epoch = 0;        // completed epochs
  int64_t global_step = 0;  // steps taken
  double best_metric = std::numeric_limits<double>::quiet_NaN();
  int64_t best_epoch = 0;
};

// Where an epoch stands after a step: RunLog::progress() computes the rates and times to go from it.
struct EpochPosition {
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch
  double lr = 0;
  double loss = 0;          // mean loss of the epoch's counted steps so far (NaN: none yet)
  int64_t skipped = 0;      // steps skipped (NaN/Inf) so far in the epoch
  int64_t samples = 0;      // drawn since this process started the epoch, over every rank
  double data_seconds = 0;  // waited for batches since this process started the epoch
  double gpu_busy = std::numeric_limits<double>::quiet_NaN();  // GpuBusyClock::share_so_far(); NaN: CPU
};

class RunLog {
 public:
  RunLog(RunLogSettings settings, const RunPaths& paths);
  ~RunLog();
  // metrics.csv (and steps.csv): fresh files, or, after a resume, kept through the checkpoint's
  // epoch and global step (rows written after it are dropped and written again). TensorBoard: a
  // new events file starting with a session start at the next step, so TensorBoard drops the
  // events a killed run wrote after the checkpoint.
  void begin(const std::optional<RunPosition>& resumed);
  void banner(const Runtime& runtime, int64_t parameters, const std::string& loss) const;
  // Whether a progress report is due: a quarter second (or logging.progress_seconds when shorter)
  // since the last redraw of the status line (bar), logging.progress_seconds since the last
  // progress line (lines), never (off).
  bool progress_due() const;
  void progress(const Progress& p);
  // The report at `at`: samples and steps per second, the data share and the times to go (to the
  // epoch's and the run's end) from the clock and first step of start_epoch(); GPU memory of `device`.
  void progress(const EpochPosition& at, const torch::Device& device);
  // The epoch's clock starts; `first_step` > 0 when resumed inside the epoch.
  void start_epoch(int64_t first_step = 0) {
    last_progress_ = epoch_started_ = std::chrono::steady_clock::now();
    first_step_ = first_step;
  }
  // The status line while validating: `done` of `total` val cases of `epoch` (redrawn when due, and
  // at 0 and at total). Host-side only.
  void validation_progress(int64_t epoch, int64_t done, int64_t total);
  // The status line while the checkpoints after `epoch` are written.
  void checkpointing(int64_t epoch);
  // Measured times the run's ETA counts for each epoch left: the last validation (`full`: whole
  // volumes; else patches only) and the last epoch-end checkpoint.
  void validated(bool full, double seconds);
  void checkpointed(double seconds);
  // Removes the status line (before the epoch summary, at the end, on an error).
  void clear_progress() const;
  bool shows_bar() const { return bar_; }
  // steps.csv row (logging.step_log): one host read of the loss and the skip flag; with
  // logging.tensorboard, every logging.tensorboard_steps the loss and lr (one host read).
  void step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, double lr, const torch::Tensor& loss,
            const torch::Tensor& found_inf);
  // Called before step()'s host reads (StepMonitor::set_before_read: a bounded wait for the device).
  void set_before_read(std::function<void()> hook) { before_read_ = std::move(hook); }
  // The metrics row and the epoch summary line of `epoch`, which ended at `global_step`; `lr` is
  // its last step's learning rate.
  void epoch(int64_t epoch, int64_t global_step, const EpochStats& train, const std::optional<ValStats>& val,
             bool improved, double lr);
  // The last line: epochs, steps, the best value, the run folder, and the peak memory of this
  // process (host resident set; on CUDA also the caching allocator's peak allocated and reserved).
  void done(const RunPosition& state, const torch::Device& device) const;
  // Once per process, after its first step has completed: the seconds since the process started
  // (LibTorch load, data load, network build, cuDNN autotuning, CUDA-graph capture): "first step
  // done 12.3 s after the start".
  void first_step() const;

 private:
  // progress.png/.svg and the TensorBoard events of the epoch ending at `global_step`.
  void epoch_views(int64_t global_step, const std::map<std::string, std::string>& row,
                   const std::optional<ValStats>& val);
  void view_failed(const std::string& what, const std::exception& e);
  // Seconds to the run's end from `epoch` with `epoch_left` s of its training steps to go; counts
  // the validations and checkpoints of `epoch` (unless `after_validation`) and of every later epoch.
  double run_seconds_left(int64_t epoch, double epoch_left, bool after_validation) const;
  std::vector<std::string> dice_columns() const;

  const RunLogSettings settings_;
  const RunPaths& paths_;
  std::function<void()> before_read_;
  std::unique_ptr<MetricsCsv> csv_;
  std::unique_ptr<MetricsCsv> step_csv_;  // logging.step_log
  std::chrono::steady_clock::time_point last_progress_;
  std::chrono::steady_clock::time_point epoch_started_;
  int64_t first_step_ = 0;
  double step_seconds_ = std::numeric_limits<double>::quiet_NaN();                // per training step, last measured
  double full_val_seconds_ = 0, patch_val_seconds_ = 0, checkpoint_seconds_ = 0;  // last measured
  std::chrono::steady_clock::time_point phase_started_;
  std::unique_ptr<TensorBoardWriter> tb_;  // logging.tensorboard
  bool view_warned_ = false;               // a plot or TensorBoard failure was reported
  bool bar_ = false;                       // logging.progress resolved: a status line on the terminal
  bool lines_ = false;                     // plain progress lines
};

}  // namespace u3d
