// The numbers an epoch reports (metrics.csv, the epoch line, TensorBoard): the training side
// (EpochStats, from the trainer) and the validation side (ValStats, from train/validator.h).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace u3d {

// Where this process's wall time of an epoch went: the GPU busy share (metrics.csv gpu_busy) and the
// note that explains a low one. A resume inside an epoch starts a new clock. Seconds.
struct EpochTime {
  double gpu = std::numeric_limits<double>::quiet_NaN();  // GPU time of the steps (train/gpu_busy.h); NaN: CPU
  double training = 0;                                    // the training steps' wall time, data waits included
  double data_wait = 0;                                   // the part of it the loop waited for batches
  double checkpoint = 0;  // epoch-end checkpoint writes after the previous epoch's row (0: first epoch here)
};

// The epoch's wall time here: training + `val_seconds` (its validation, 0 when none) + checkpoint.
double epoch_wall_seconds(const EpochTime& t, double val_seconds);
// gpu / epoch_wall_seconds, in [0, 1]; NaN on the CPU (the column stays empty, never 0).
double gpu_busy_share(const EpochTime& t, double val_seconds);
// Below `kLowGpuBusy`: what the rest of the wall time was, as shares of it, e.g. "GPU idle 45% of
// 12.3 s: data wait 30%, validation 10%, checkpoint writes 3%, host work between steps 2%" (host
// work: training time neither on the GPU nor waiting for data). Empty when the share is not low or
// not known.
constexpr double kLowGpuBusy = 0.8;
std::string gpu_idle_note(const EpochTime& t, double val_seconds);

struct EpochStats {
  double train_loss = 0;
  std::vector<double> term_losses;  // per term of a training.loss list: the epoch's mean (loss_<name>)
  double seconds = 0;               // training time of the whole epoch (before a resume too), s
  double data_seconds = 0;          // the part of it the loop waited for batches (BatchLoader::wait_seconds)
  int64_t samples = 0;
  int64_t skipped = 0;  // steps skipped for a non-finite loss or gradient norm
  EpochTime time;       // this process's part: the GPU busy share
};

struct ValStats {
  double loss = std::numeric_limits<double>::quiet_NaN();
  // The task metric, in its metrics.csv column RunLogSettings::metric_name.
  double metric = std::numeric_limits<double>::quiet_NaN();
  bool complete = true;  // false: interrupted by a stop signal
  // OpenKBP scores (Gy) when dose metrics are scored (RunLogSettings::scores_dose); NaN otherwise.
  double dose_score = std::numeric_limits<double>::quiet_NaN();
  double dvh_score = std::numeric_limits<double>::quiet_NaN();
  double pseudo_dice = std::numeric_limits<double>::quiet_NaN();      // val patches, this epoch
  double pseudo_dice_ema = std::numeric_limits<double>::quiet_NaN();  // its running EMA
  // nnU-Net's "Pseudo dice [0.87, 0.61]": the pseudo-Dice of each foreground class (1 .. K - 1), NaN
  // for a class absent from prediction and target alike; pseudo_dice is their mean over the finite ones.
  std::vector<double> pseudo_dice_per_class;
  double seconds = 0;  // the validation's wall time (whole volumes and patches), s
  // With logging.tensorboard: the middle slice along D of the first val case, (H, W) float32 on the
  // CPU: its first input channel, its target (labels or target units) and the prediction.
  std::string preview_case;
  torch::Tensor preview_input, preview_target, preview_prediction;
};

}  // namespace u3d
