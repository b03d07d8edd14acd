#include "u3d/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "u3d/errors.h"
#include "u3d/files.h"

namespace u3d {
namespace {

// The PID the holder wrote, or "" when it has not written it yet (or the file cannot be read).
std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return "";
  return s;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& run_root) {
  ensure_writable_directory(run_root);  // one message for a folder that cannot be made or written
  const std::filesystem::path path = run_root / kFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw IoError(fmt::format("{}: cannot create the lock file {}: {}", run_root.string(), path.string(),
                              std::strerror(errno)));
  }
  int rc;
  do {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    const std::string pid = err == EWOULDBLOCK ? holder_pid(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw IoError(fmt::format("{}: cannot lock {}: {}", run_root.string(), path.string(), std::strerror(err)));
    }
    throw ConfigError(fmt::format("{}: the run folder is in use by another trainer process ({}); wait for it to end, "
                                  "or choose another experiment.name",
                                  run_root.string(), pid.empty() ? std::string("PID not yet recorded") : "PID " + pid));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    // The lock holds regardless; only the PID in a second process's message would be missing.
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace u3d
