// Exclusive use of a run folder by one trainer process.
//
//   RunLock lock(paths.root);   // training, --resume and --predict-only into the same run
//
// An exclusive flock(2) on the run folder itself, held for the life of the object (the process):
// a folder in use cannot be unlinked, so deleting files in it (.trainer.lock included) never lets
// a second process in. Where the file system cannot lock a folder (NFS emulates flock with POSIX
// locks), the file <run>/.trainer.lock is locked instead. The kernel releases the lock when the
// process ends in any way (also SIGKILL), so a stale lock can never block a later run. The holder
// writes its PID into <run>/.trainer.lock for the message a second process gets: ConfigError
// (exit 2) naming the run folder and that PID.
//
// A start that fails its checks leaves no trace: when the lock made the run folder (and its
// parents) and the folder holds nothing but the lock file on release, the lock file and the
// folders it made are removed. Removing a held folder is safe because every process checks, after
// flock, that what it locked is still at the path (else it retries).
#pragma once
#include <filesystem>
#include <vector>

namespace u3d {

class RunLock {
 public:
  static constexpr const char* kFileName = ".trainer.lock";

  // Creates `run_root` (and parents) when missing and takes the lock; ConfigError when another
  // process holds it, IoError when the folder cannot be created (ensure_writable_directory) or locked.
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
