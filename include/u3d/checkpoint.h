// Checkpoints: everything a continuation needs, written crash-safely (temporary file, fsync,
// rename, folder fsync), so the newest complete checkpoint always survives a crash mid-write.
//
// A checkpoint is a LibTorch archive (zip) holding: the model's parameters and buffers, the
// optimizer state, the training position (TrainState), the CPU and CUDA RNG states, the resolved
// config as YAML, the program version and git commit, and what the network was built for.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "u3d/unet.h"

namespace u3d {

struct TrainState {
  int64_t epoch = 0;          // completed epochs
  int64_t global_step = 0;    // optimizer steps taken
  int64_t step_in_epoch = 0;  // steps done in the unfinished epoch (0 at an epoch boundary)
  double best_metric = std::numeric_limits<double>::quiet_NaN();
  int64_t best_epoch = 0;
  double train_target_mean = 0;  // regression: mean training target in the loss mask (baseline)
  double pseudo_dice_ema = std::numeric_limits<double>::quiet_NaN();  // nnU-Net's EMA of the val pseudo-Dice
};

struct CheckpointInfo {
  TrainState state;
  std::string config_yaml;  // resolved config of the run that wrote it
  std::string version;
  std::string commit;
  std::string created;      // UTC, ISO 8601
  std::string task;         // "dose" | "segmentation"
  int64_t in_channels = 0;
  int64_t out_channels = 0;
};

void save_checkpoint(const std::filesystem::path& path, const CheckpointInfo& info, NetworkImpl& model,
                     torch::optim::Optimizer* optimizer);
// Metadata only (config, state, version).
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path);
// Loads weights into `model` (already built from the checkpoint's config and on `device`), the
// optimizer state when `optimizer` is given, and the RNG states when `restore_rng`.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, NetworkImpl& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device, bool restore_rng);

// The checkpoints/ folder of a run: periodic epoch_NNNN.pt files and best.pt.
class CheckpointStore {
 public:
  CheckpointStore(std::filesystem::path dir, int64_t keep_last);
  std::filesystem::path periodic_path(int64_t epoch) const;
  std::filesystem::path best_path() const { return dir_ / "best.pt"; }
  // Periodic checkpoints, oldest first.
  std::vector<std::filesystem::path> periodic() const;
  std::optional<std::filesystem::path> latest() const;
  // Deletes all but the newest keep_last periodic checkpoints (a failed delete is a warning).
  void prune() const;
  // "last" (newest periodic), "best" (best.pt, else the newest periodic) or a path; CheckpointError
  // with exit code 2 when nothing matches.
  std::filesystem::path resolve(const std::string& which) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int64_t keep_last_;
};

}  // namespace u3d
