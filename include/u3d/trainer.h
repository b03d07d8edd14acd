// The training run: named stages and a short fit() (as nnU-Net's run_training).
//
//   Trainer trainer(cfg, TrainOptions{});
//   trainer.fit();   // prepare_run -> setup_runtime -> load_data -> build_model -> restore
//                    // -> record_run -> per epoch: train_epoch, validate, save_checkpoints, log_epoch
#pragma once
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>

#include "u3d/cache.h"
#include "u3d/checkpoint.h"
#include "u3d/config.h"
#include "u3d/dataset.h"
#include "u3d/logging.h"
#include "u3d/losses.h"
#include "u3d/metrics.h"
#include "u3d/preprocess.h"
#include "u3d/run.h"
#include "u3d/sampler.h"
#include "u3d/schedule.h"
#include "u3d/unet.h"

namespace u3d {

struct TrainOptions {
  // Unset: a fresh run (refused when the run folder already holds checkpoints).
  // "" : continue from the newest checkpoint of the run; else the checkpoint at that path.
  std::optional<std::string> resume;
};

struct EpochStats {
  double train_loss = 0;
  double seconds = 0;
  double data_seconds = 0;  // time the loop spent getting batches
  int64_t samples = 0;
};

struct ValStats {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double metric = std::numeric_limits<double>::quiet_NaN();
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
  void prepare_run();
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

  const TrainState& state() const { return state_; }
  const Config& config() const { return cfg_; }
  NetworkImpl& network() { return *net_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  void print_banner() const;
  void log_epoch(int64_t epoch, const EpochStats& train, const std::optional<ValStats>& val, bool improved);
  CheckpointInfo checkpoint_info() const;
  Monitor monitored() const;  // checkpoint.monitor with auto resolved

  Config cfg_;
  TrainOptions options_;
  RunPaths paths_;
  CheckpointStore store_;
  Runtime runtime_;
  std::unique_ptr<DatasetReader> reader_;
  std::unique_ptr<Preprocessor> pre_;
  std::unique_ptr<TensorCache> train_cache_, val_cache_;
  std::unique_ptr<PatchSampler> sampler_;
  std::unique_ptr<PatchSampler> val_sampler_;  // pseudo-Dice patches
  std::vector<double> deep_weights_;            // deep-supervision loss weights, finest output first
  Network net_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<MetricsCsv> csv_;
  TaskMetric metric_;
  TrainState state_;
  int64_t steps_per_epoch_ = 0;
};

}  // namespace u3d
