#include "u3d/core/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"

namespace u3d {
namespace {

// The PID the holder wrote into `file`, or "" when it has not written it yet (or the file is gone).
std::string holder_pid(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  ::close(fd);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return "";
  return s;
}

// Whether `fd` is still the file or folder at `path` (a releasing holder may have removed it).
bool still_linked(int fd, const std::filesystem::path& path) {
  struct stat opened {
  }, linked{};
  if (::fstat(fd, &opened) != 0 || ::stat(path.c_str(), &linked) != 0) return false;
  return opened.st_dev == linked.st_dev && opened.st_ino == linked.st_ino;
}

// flock(2) cannot lock a folder here (NFS emulates flock with POSIX locks, which need a file open
// for writing): lock a file in it instead.
bool folder_lock_unsupported(int err) { return err == EBADF || err == ENOLCK || err == EOPNOTSUPP || err == EINVAL; }

}  // namespace

RunLock::RunLock(const std::filesystem::path& run_root) : root_(run_root) {
  check_no_dangling_link(run_root);  // before anything counts as created (and removed on failure)
  std::error_code ec;
  for (auto p = run_root; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  const std::filesystem::path file = run_root / kFileName;
  // The folder itself is locked: unlike a file in it, it cannot be unlinked while the run uses it.
  std::filesystem::path target = run_root;
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  int rc = -1, err = 0;
  for (int attempt = 0;; ++attempt) {
    ensure_writable_directory(run_root);  // one message for a folder that cannot be made or written
    fd_ = ::open(target.c_str(), flags, 0644);
    if (fd_ < 0) {
      if (errno == ENOENT && attempt < 10) continue;  // the folder was removed by a releasing holder
      throw IoError(
          fmt::format("{}: cannot open {} to lock it: {}", run_root.string(), target.string(), std::strerror(errno)));
    }
    do {
      rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    err = rc != 0 ? errno : 0;
    if (rc != 0 && target == run_root && folder_lock_unsupported(err) && attempt < 10) {
      ::close(fd_);
      target = file;
      flags = O_RDWR | O_CREAT | O_CLOEXEC;
      continue;
    }
    if (rc != 0 || still_linked(fd_, target) || attempt >= 10) break;
    ::close(fd_);  // locked what a releasing holder had just removed: take the new one
    fd_ = -1;
  }
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw IoError(fmt::format("{}: cannot lock {}: {}", run_root.string(), target.string(), std::strerror(err)));
    }
    const std::string pid = holder_pid(file);
    std::error_code missing;
    const std::string holder = !pid.empty() ? "PID " + pid
                               : std::filesystem::exists(file, missing)
                                   ? std::string("PID not yet recorded")
                                   : "PID unknown: " + file.string() + " was removed";
    throw ConfigError(
        fmt::format("{}: the run folder is in use by another trainer process ({}); wait for it to end, "
                    "or choose another experiment.name",
                    run_root.string(), holder));
  }
  // The holder's PID, for a second process's message (the lock holds without it).
  const std::string text = std::to_string(::getpid()) + "\n";
  const int pid_fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (pid_fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(pid_fd, text.data(), text.size());
    ::close(pid_fd);
  }
}

void RunLock::remove_if_unused() noexcept {
  if (created_.empty()) return;
  try {
    for (const auto& e : std::filesystem::directory_iterator(root_)) {
      if (e.path().filename() != kFileName) return;  // the run wrote something: keep the folder
    }
    std::error_code ec;
    std::filesystem::remove(root_ / kFileName, ec);
    for (const auto& folder : created_) {
      if (::rmdir(folder.c_str()) != 0) break;  // not empty (another process's run) or gone
    }
  } catch (const std::exception&) {
    // Cannot list the folder: leave it as it is.
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  remove_if_unused();
  ::close(fd_);  // releases the flock
}

}  // namespace u3d
