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
// The checkpoints/ folder (CheckpointStore):
//   epoch_NNNN.pt               end of epoch NNNN
//   epoch_NNNN_step_SSSSSS.pt   inside epoch NNNN after SSSSSS steps (checkpoint.every_minutes,
//                               or a stop by signal)
//   best.pt                     best validation score so far
//   manifest.sha256             "<sha256>  <file>" per checkpoint (sha256sum format:
//                               `cd checkpoints && sha256sum -c manifest.sha256` checks them by hand)
//
// Commit protocol (CheckpointStore::commit), each step durable before the next:
//   1. bytes -> temporary file ".<name>.tmp.<pid>.<n>" in the same folder, hashed on the way, fsync
//   2. manifest rewritten atomically with the new hash added (the old one for that name kept)
//   3. rename over <name>, fsync the folder
//   4. manifest rewritten without the replaced hash and without entries of deleted files
// A kill between any two steps leaves <name> matching one of its listed hashes. Temporaries of
// dead writers are removed at the next start (remove_stale_temporaries).
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
#include "u3d/model/unet.h"
#include "u3d/train/optimizer.h"

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
                     const Optimizer* optimizer);
// Metadata only (config, state, version). CheckpointError: exit 2 when missing, 1 when unreadable.
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path);
// Loads weights into `model` (already built from the checkpoint's config and on `device`), the
// optimizer state when `optimizer` is given, and the RNG states when `restore_rng`.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, NetworkImpl& model, Optimizer* optimizer,
                               const torch::Device& device, bool restore_rng);

// How a checkpoint compares with the manifest of its folder.
struct Verification {
  enum class Status { kOk, kNoManifest, kUnlisted, kMismatch, kMissing } status = Status::kOk;
  std::string detail;  // for everything but kOk: one line naming the file and what is wrong
  bool verified() const { return status == Status::kOk; }
};

// The checkpoints/ folder of a run.
class CheckpointStore {
 public:
  static constexpr const char* kManifestName = "manifest.sha256";

  CheckpointStore(std::filesystem::path dir, int64_t keep_last);
  std::filesystem::path periodic_path(int64_t epoch) const;            // epoch_NNNN.pt
  std::filesystem::path step_path(int64_t epoch, int64_t step) const;  // epoch_NNNN_step_SSSSSS.pt
  std::filesystem::path best_path() const { return dir_ / "best.pt"; }
  std::filesystem::path manifest_path() const { return dir_ / kManifestName; }
  // Periodic and step checkpoints present, oldest first (epoch end after that epoch's steps).
  std::vector<std::filesystem::path> periodic() const;
  // The newest of periodic(), unverified.
  std::optional<std::filesystem::path> latest() const;

  // Commits `path` (a file in this folder) with the bytes `write` sends to its sink, by the
  // protocol above. On failure: IoError naming the path and the free space, the old file and the
  // manifest unchanged (or still listing the old hash), the temporary file removed.
  void commit(const std::filesystem::path& path, const std::function<void(const ByteSink&)>& write) const;
  // SHA-256 check of `path` against this folder's manifest (reads the whole file).
  Verification verify(const std::filesystem::path& path) const;
  // The newest periodic checkpoint that matches the manifest and opens; each newer one that does
  // not is reported (warning naming it and why) and skipped. A folder without a manifest (written
  // by an older trainer, or the manifest deleted) falls back to the newest that opens, with a
  // warning. std::nullopt when there is none.
  std::optional<std::filesystem::path> newest_valid() const;
  // Deletes periodic checkpoints older than the newest keep_last (>= 2) listed ones, only after a
  // commit; a failed delete is a warning. Files the manifest does not list are not counted as
  // kept and are left alone.
  void prune() const;
  // Removes ".<name>.tmp.<pid>.<n>" files left by a writer that no longer runs.
  void remove_stale_temporaries() const;
  // "last": newest_valid(); "best": best.pt when it verifies, else newest_valid() (warning);
  // otherwise a path, verified against its own folder's manifest (a mismatch is an error, a file
  // the manifest does not list a warning). CheckpointError with exit code 2 when nothing exists.
  std::filesystem::path resolve(const std::string& which) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int64_t keep_last_;
};

// Test-only fault hook (faults.h): U3D_TEST_FAULTS=checkpoint_delay@N makes every checkpoint
// commit pause N ms after each chunk written and between the protocol steps, so a
// test can kill the process inside a checkpoint write. Unset: no delay.
void checkpoint_test_delay();

}  // namespace u3d
