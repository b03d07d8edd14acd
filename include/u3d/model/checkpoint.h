// Checkpoints: everything a bit-exact continuation needs, committed crash-safely and listed with
// their SHA-256 in a manifest, so the newest complete checkpoint always survives a crash, a kill
// or a full disk mid-write, and a truncated or altered one is recognised before it is loaded.
//
// A checkpoint is a LibTorch archive (zip) holding: the model's parameters and buffers; the
// optimizer state (moments, momentum buffers, device step counters, learning rate); the training
// position (TrainState: epoch, step inside the epoch, global step, the unfinished epoch's loss sums,
// skip counters, loss-scaler state); the sampler position and a fingerprint of the training cases;
// the CPU and CUDA RNG states; the resolved config as YAML; the program version and git commit; and
// what the network was built for. The sampler's streams are counter-based (sampler.h), so its
// position is all a resume needs to draw the same batches.
//
// Where checkpoints are kept and how they are committed: model/checkpoint_store.h.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/files.h"
#include "u3d/model/checkpointed_state.h"
#include "u3d/model/unet.h"

namespace u3d {

struct TrainState {
  int64_t epoch = 0;          // completed epochs
  int64_t global_step = 0;    // steps taken, skipped (non-finite) ones included
  int64_t step_in_epoch = 0;  // steps done in the unfinished epoch (0 at an epoch boundary)
  double best_metric = std::numeric_limits<double>::quiet_NaN();
  int64_t best_epoch = 0;
  double train_target_mean = 0;  // regression: mean training target in the loss mask (baseline)
  // The unfinished epoch's running totals, so a run resumed mid-epoch writes the same metrics row.
  double epoch_loss_sum = 0;            // sum of the finite step losses
  std::vector<double> epoch_term_sums;  // the same per term of a training.loss list (empty: none)
  int64_t epoch_loss_steps = 0;         // steps in epoch_loss_sum
  int64_t epoch_samples = 0;
  int64_t epoch_skipped = 0;  // steps skipped for a non-finite loss or gradient norm
  int64_t skipped_total = 0;
  int64_t skipped_in_a_row = 0;  // consecutive skipped steps ending at global_step
  // Dynamic loss scaling (fp16): scale and steps since the last back-off. 1 and 0 without it.
  double loss_scale = 1.0;
  int64_t loss_scale_growth = 0;
  double pseudo_dice_ema = std::numeric_limits<double>::quiet_NaN();  // nnU-Net's EMA of the val pseudo-Dice
  // The unfinished epoch's training time, s (all processes before a resume), and the part of it
  // spent waiting for batches: its metrics row reports the whole epoch.
  double epoch_seconds = 0;
  double epoch_data_seconds = 0;
  // Wall-clock seconds of the run at its last epoch end (every process, start-up and validation
  // included): what training.max_minutes counts.
  double run_seconds = 0;
};

// Where the patch sampler stands: its streams are a pure function of (seed, epoch, sample index),
// so this position is its whole state. The fingerprint detects a changed training split.
struct SamplerPosition {
  int64_t seed = 0;
  int64_t batch_size = 0;
  int64_t epoch = 0;         // the epoch the next batch belongs to
  int64_t next_sample = 0;   // index of the next sample in that epoch
  int64_t cases = 0;         // training cases
  std::string cases_sha256;  // SHA-256 of the training case ids, one per line, in split order
  int64_t world_size = 1;    // data-parallel processes of the run that wrote it (batch_size is per process)
};

struct CheckpointInfo {
  TrainState state;
  SamplerPosition sampler;
  std::string config_yaml;  // resolved config of the run that wrote it
  std::string version;
  std::string commit;
  std::string created;  // UTC, ISO 8601
  std::string task;     // "dose" | "segmentation"
  int64_t in_channels = 0;
  int64_t out_channels = 0;
};

// Writes a checkpoint through CheckpointStore(path's folder).commit (see the protocol above).
// IoError naming the path and the free space when it cannot be written; the previous file of that
// name stays intact and no temporary file is left.
void save_checkpoint(const std::filesystem::path& path, const CheckpointInfo& info, NetworkImpl& model,
                     const CheckpointedState* optimizer);
// Metadata only (config, state, version). CheckpointError: exit 2 when missing, 1 when unreadable.
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path);
// Loads weights into `model` (already built from the checkpoint's config and on `device`), the
// optimizer state when `optimizer` is given, and the RNG states when `restore_rng`.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, NetworkImpl& model, CheckpointedState* optimizer,
                               const torch::Device& device, bool restore_rng);

}  // namespace u3d
