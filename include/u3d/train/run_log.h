// What a run reports as it goes: the console and train.log lines (banner, progress inside an epoch,
// the epoch summary, the end), metrics.csv (one row per epoch) and, with logging.step_log,
// steps.csv (one row per step), and the epoch-level views of them: <run>/progress.png and .svg
// (logging.plot, train/progress_plot.h) and TensorBoard event files (logging.tensorboard,
// train/tensorboard.h: tags epoch/<metrics.csv column> and step/train_loss, step/lr at the global
// step; images progress and val/input, val/target, val/prediction). A plot or TensorBoard write
// that fails is a warning, never the end of the run.
//
// metrics.csv columns: epoch, step, lr, train_loss, [loss_<term> per term of a training.loss list,
// unweighted], val_loss, <task metric>, [val_pseudo_dice,
// val_pseudo_dice_ema], [val_dose_score, val_dvh_score], best, epoch_seconds, data_seconds,
// data_share, samples_per_second, skipped_steps (bracketed ones when that validation runs).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "u3d/core/logging.h"
#include "u3d/core/run.h"
#include "u3d/train/checkpoint.h"
#include "u3d/train/resolve.h"
#include "u3d/train/validator.h"

namespace u3d {

class TensorBoardWriter;

struct EpochStats {
  double train_loss = 0;
  std::vector<double> term_losses;  // per term of a training.loss list: the epoch's mean (loss_<name>)
  double seconds = 0;               // training time of the whole epoch (before a resume too), s
  double data_seconds = 0;          // the part of it the loop waited for batches (BatchLoader::wait_seconds)
  int64_t samples = 0;
  int64_t skipped = 0;  // steps skipped for a non-finite loss or gradient norm
};

// The numbers of one progress report inside an epoch (a status-line redraw or a progress line).
struct Progress {
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch
  double loss = 0, lr = 0;
  double samples_per_second = 0;
  double steps_per_second = 0;
  double data_share = 0;        // waiting for batches / elapsed
  double seconds_left = 0;      // estimated, to the epoch's end
  double run_seconds_left = 0;  // estimated, to the run's end (training steps only, validation not counted)
  int64_t skipped = 0;          // steps skipped (NaN/Inf) so far in the epoch
  int64_t gpu_bytes = -1;       // GPU memory held by the caching allocator (reserved); -1: not on a GPU
  int64_t gpu_total = 0;        // the GPU's memory; 0: unknown
};

// Where an epoch stands after a step: RunLog::progress() computes the rates and times to go from it.
struct EpochPosition {
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch
  double lr = 0;
  double loss = 0;          // mean loss of the epoch's counted steps so far (NaN: none yet)
  int64_t skipped = 0;      // steps skipped (NaN/Inf) so far in the epoch
  int64_t samples = 0;      // drawn since this process started the epoch, over every rank
  double data_seconds = 0;  // waited for batches since this process started the epoch
};

// The status line of logging.progress bar, cut to `columns`:
// "epoch 3/100 [#######-----]  45% 120/266 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210 | lr 1.00e-03 |
//  data 3% | GPU 41.2/79.6 GiB" (no GPU part when p.gpu_bytes < 0).
std::string progress_bar_line(const Progress& p, int64_t epochs, int64_t steps, int columns);
// "1:02:03", "4:05" (minutes:seconds under an hour), "--" for a negative or non-finite time.
std::string clock_text(double seconds);

class RunLog {
 public:
  RunLog(const ResolvedConfig& rc, const RunPaths& paths);
  ~RunLog();
  // metrics.csv (and steps.csv): fresh files, or, after a resume, kept through the checkpoint's
  // epoch and global step (rows written after it are dropped and written again). TensorBoard: a
  // new events file starting with a session start at the next step, so TensorBoard drops the
  // events a killed run wrote after the checkpoint.
  void begin(const std::optional<TrainState>& resumed);
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
  void done(const TrainState& state) const;

 private:
  // progress.png/.svg and the TensorBoard events of the epoch ending at `global_step`.
  void epoch_views(int64_t global_step, const std::map<std::string, std::string>& row,
                   const std::optional<ValStats>& val);
  void view_failed(const std::string& what, const std::exception& e);

  const ResolvedConfig& rc_;
  const RunPaths& paths_;
  std::function<void()> before_read_;
  std::unique_ptr<MetricsCsv> csv_;
  std::unique_ptr<MetricsCsv> step_csv_;  // logging.step_log
  std::chrono::steady_clock::time_point last_progress_;
  std::chrono::steady_clock::time_point epoch_started_;
  int64_t first_step_ = 0;
  std::unique_ptr<TensorBoardWriter> tb_;  // logging.tensorboard
  bool view_warned_ = false;               // a plot or TensorBoard failure was reported
  bool bar_ = false;                       // logging.progress resolved: a status line on the terminal
  bool lines_ = false;                     // plain progress lines
};

}  // namespace u3d
