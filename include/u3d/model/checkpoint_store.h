// The checkpoints/ folder of a run: its file names, the crash-safe commit of a checkpoint's bytes,
// the SHA-256 manifest, verification, pruning and the choice of the checkpoint to resume from. What
// a checkpoint holds: model/checkpoint.h.
//
// The checkpoints/ folder (CheckpointStore):
//   epoch_NNNN.pt               end of epoch NNNN
//   epoch_NNNN_step_SSSSSS.pt   inside epoch NNNN after SSSSSS steps (checkpoint.every_minutes,
//                               or a stop by signal)
//   best.pt                     best validation score so far
//   manifest.sha256             "<sha256>  <file>" per checkpoint (sha256sum format:
//                               `cd checkpoints && sha256sum -c manifest.sha256` checks them by hand)
//
// Commit protocol (commit_checkpoint_file in model/checkpoint_manifest.h, through which
// CheckpointStore::commit and save_checkpoint write), each step durable before the next:
//   1. bytes -> temporary file ".<name>.tmp.<pid>.<n>" in the same folder, hashed on the way, fsync
//   2. manifest rewritten atomically with the new hash added (the old one for that name kept)
//   3. rename over <name>, fsync the folder
//   4. manifest rewritten without the replaced hash and without entries of deleted files
// A kill between any two steps leaves <name> matching one of its listed hashes. Temporaries of
// dead writers are removed at the next start (remove_stale_temporaries).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/files.h"
#include "u3d/model/checkpoint_manifest.h"

namespace u3d {

// How a checkpoint compares with the manifest of its folder.
struct Verification {
  enum class Status { kOk, kNoManifest, kUnlisted, kMismatch, kMissing } status = Status::kOk;
  std::string detail;  // for everything but kOk: one line naming the file and what is wrong
  bool verified() const { return status == Status::kOk; }
};

// The checkpoints/ folder of a run.
class CheckpointStore {
 public:
  static constexpr const char* kManifestName = kCheckpointManifestName;

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
  // Rewrites the manifest as a completed commit leaves it, after a kill inside one: one line per
  // name (for a name listed twice, the hash its file has; all of them when it has neither) and no
  // line for a file that is not there. Afterwards `sha256sum -c manifest.sha256` passes when every
  // checkpoint is intact. Called at the start of a run, beside remove_stale_temporaries().
  void tidy_manifest() const;
  // "last": newest_valid(); "best": best.pt when it verifies, else newest_valid() (warning);
  // otherwise a path, verified against its own folder's manifest (a mismatch is an error, a file
  // the manifest does not list a warning). CheckpointError with exit code 2 when nothing exists.
  std::filesystem::path resolve(const std::string& which) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int64_t keep_last_;
};

}  // namespace u3d
