// Exclusive use of a run folder by one trainer process.
//
//   RunLock lock(paths.root);   // training, --resume and --predict-only into the same run
//
// An exclusive flock(2) on <run>/.trainer.lock, held for the life of the object (the process).
// The kernel releases it when the process ends in any way (also SIGKILL), so a stale lock can
// never block a later run; the file itself is left in place (removing it would race with a
// process that opened it). The holder writes its PID into the file for the message a second
// process gets: ConfigError (exit 2) naming the run folder and that PID.
//
// A start that fails its checks leaves no trace: when the lock made the run folder (and its
// parents) and the folder holds nothing but the lock file on release, the lock file and the
// folders it made are removed. Unlinking a held lock file is safe because every process
// checks, after flock, that the file it locked is still the one at the path (else it retries).
#pragma once
#include <filesystem>
#include <vector>

namespace u3d {

class RunLock {
 public:
  static constexpr const char* kFileName = ".trainer.lock";

  // Creates `run_root` (and parents) when missing and takes the lock; ConfigError when another
  // process holds it, IoError when the folder or the lock file cannot be created.
  explicit RunLock(const std::filesystem::path& run_root);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  void remove_if_unused() noexcept;

  int fd_ = -1;
  std::filesystem::path root_;
  std::vector<std::filesystem::path> created_;  // folders this lock made, innermost first
};

}  // namespace u3d
