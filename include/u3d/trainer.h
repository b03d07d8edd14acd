// The training run: named stages and a short fit() (as nnU-Net's run_training).
//
//   Trainer trainer(cfg, TrainOptions{});
//   trainer.fit();   // check_run_folder -> setup_runtime -> load_data (the data preflight, then
//                    // prepare_run: nothing is written before) -> build_model -> restore -> record_run
//                    // -> per epoch: train_epoch, validate, save_checkpoints, log_epoch
//
// Reliability (docs/reliability.md): SIGINT/SIGTERM/SIGHUP end the run after the current step
// with a checkpoint (stop_signal() then names the signal; the process exits with 128 + signal);
// checkpoint.every_minutes adds checkpoints inside long epochs; a step whose loss or gradient norm
// is not finite is skipped on the device and counted, and training.max_nonfinite_steps skips in a
// row stop the run (TrainingError); out of memory stops it with the settings to change.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <utility>

#include "u3d/cache.h"
#include "u3d/checkpoint.h"
#include "u3d/config.h"
#include "u3d/faults.h"
#include "u3d/dataset.h"
#include "u3d/loader.h"
#include "u3d/logging.h"
#include "u3d/losses.h"
#include "u3d/metrics.h"
#include "u3d/optimizer.h"
#include "u3d/preprocess.h"
#include "u3d/run.h"
#include "u3d/sampler.h"
#include "u3d/schedule.h"
#include "u3d/step_monitor.h"
#include "u3d/train_step.h"
#include "u3d/unet.h"

namespace u3d {

class DoseEvaluator;

struct TrainOptions {
  // Unset: a fresh run (refused when the run folder already holds checkpoints).
  // "" : continue from the newest checkpoint of the run; else the checkpoint at that path.
  std::optional<std::string> resume;
  // Keys (or "section.*") a resume may change besides the runtime keys (resume.h).
  std::vector<std::string> allow_config_change;
};

struct EpochStats {
  double train_loss = 0;
  double seconds = 0;
  double data_seconds = 0;  // time the loop waited for batches (BatchLoader::wait_seconds)
  int64_t samples = 0;
  int64_t skipped = 0;      // steps skipped for a non-finite loss or gradient norm
};

struct ValStats {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double metric = std::numeric_limits<double>::quiet_NaN();
  bool complete = true;  // false: interrupted by a stop signal
  // OpenKBP scores (Gy) when dose metrics are scored (dose task, data.dvh_structures resolves to
  // structures; include/u3d/dose_metrics.h); NaN otherwise.
  double dose_score = std::numeric_limits<double>::quiet_NaN();
  double dvh_score = std::numeric_limits<double>::quiet_NaN();
  double pseudo_dice = std::numeric_limits<double>::quiet_NaN();      // val patches, this epoch
  double pseudo_dice_ema = std::numeric_limits<double>::quiet_NaN();  // its running EMA
};

class Trainer {
 public:
  Trainer(Config cfg, TrainOptions options);
  ~Trainer();
  // Runs every stage; returns the state after the last epoch.
  TrainState fit();

  // Stages, public so tests can drive them one by one.
  void check_run_folder() const;  // read-only: refuses checkpoints of an earlier run without --resume
  void prepare_run();             // run folder, checkpoints/, train.log (load_data calls it; repeatable)
  void setup_runtime();
  void load_data();
  void build_model();
  void restore();
  void record_run() const;  // <run>/config.yaml, fresh metrics.csv: only once every check passed
  EpochStats train_epoch(int64_t epoch);
  ValStats validate();
  // nnU-Net's pseudo-Dice: training.val_patch_batches batches of val patches (drawn like training
  // patches for `epoch`, without augmentation); true positives, false positives and false negatives
  // per foreground class summed over every patch, Dice per class, mean over the classes present.
  // Sets stats.pseudo_dice, updates the EMA in the training state, sets stats.pseudo_dice_ema, and
  // fills stats.loss with the mean patch loss when it has no value yet.
  void validate_patches(int64_t epoch, ValStats& stats);
  void save_checkpoints(int64_t epoch, bool improved);
  // One optimizer step on `batch` (on the device) through TrainStep (train_step.h): forward under
  // autocast, loss, backward, gradient norm, skip flag, clipping, update, eager or as a replayed
  // CUDA graph; nothing is read back. Returns the loss (device scalar).
  torch::Tensor train_step(const Batch& batch);

  // The stop signal that ended fit() early, or 0.
  int stop_signal() const { return stop_signal_; }
  const Optimizer& optimizer() const { return *optimizer_; }

  const TrainState& state() const { return state_; }
  const Config& config() const { return cfg_; }
  NetworkImpl& network() { return *net_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  void print_banner() const;
  void log_epoch(int64_t epoch, const EpochStats& train, const std::optional<ValStats>& val, bool improved);
  CheckpointInfo checkpoint_info() const;
  // Writes `path` (periodic: also prunes and restarts the wall-clock cadence); a write error stops
  // the run or, with checkpoint.on_error = continue, is logged and retried at the next checkpoint.
  void commit_checkpoint(const std::filesystem::path& path, bool periodic);
  void save_inside_epoch(int64_t epoch);
  // Stops the run (TrainingError) when training.max_nonfinite_steps steps in a row were skipped.
  void check_nonfinite();
  void after_step(int64_t epoch, int64_t step, double lr, const torch::Tensor& loss);
  bool stopping();  // a stop signal arrived (records it)
  std::string last_checkpoint_note() const;  // for error messages: which checkpoint is intact
  // The value checkpoint.monitor watches in `val`, and whether higher is better; its column name.
  std::pair<double, bool> monitored(const ValStats& val) const;
  std::string monitor_name() const;
  Monitor resolved_monitor() const;  // checkpoint.monitor with auto resolved

  Config cfg_;
  TrainOptions options_;
  RunPaths paths_;
  CheckpointStore store_;
  Runtime runtime_;
  std::unique_ptr<DatasetReader> reader_;
  std::unique_ptr<Preprocessor> pre_;
  std::unique_ptr<StackedCache> train_cache_;
  std::unique_ptr<TensorCache> val_cache_;
  std::unique_ptr<PatchSampler> sampler_;
  std::unique_ptr<BatchLoader> loader_;  // after sampler_: destroyed (threads joined) first
  std::unique_ptr<PatchSampler> val_sampler_;  // pseudo-Dice patches
  Network net_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<Optimizer> optimizer_;
  bool sampling_in_graph_ = false;  // data.cache: gpu with a captured step: sampler inside the graph
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<TrainStep> step_;  // refers to net_, loss_, optimizer_, monitor_ (its destructor uses none)
  std::unique_ptr<MetricsCsv> csv_;
  TaskMetric metric_;
  std::unique_ptr<DoseEvaluator> dose_eval_;  // OpenKBP dose/DVH scores of the val split, or null
  TrainState state_;
  int64_t steps_per_epoch_ = 0;
  // Reliability (docs/reliability.md)
  std::unique_ptr<StepMonitor> monitor_;
  std::unique_ptr<MetricsCsv> step_csv_;  // logging.step_log
  std::unique_ptr<CheckpointCadence> cadence_;
  torch::Tensor last_found_inf_;  // () float32: whether the last step was skipped
  std::string cases_sha256_;
  int64_t saved_global_step_ = -1;  // global step of the newest committed periodic checkpoint
  bool last_save_failed_ = false;
  int stop_signal_ = 0;
  TestFaults faults_;  // test-only fault injection (faults.h); empty in normal runs
};

}  // namespace u3d
