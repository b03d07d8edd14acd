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

// Whether `fd` is still the file at `path` (a releasing holder may have unlinked it).
bool still_linked(int fd, const std::filesystem::path& path) {
  struct stat opened {
  }, linked{};
  if (::fstat(fd, &opened) != 0 || ::stat(path.c_str(), &linked) != 0) return false;
  return opened.st_dev == linked.st_dev && opened.st_ino == linked.st_ino;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& run_root) : root_(run_root) {
  std::error_code ec;
  for (auto p = run_root; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    created_.push_back(p);
    if (p == p.parent_path()) break;
  }
  const std::filesystem::path path = run_root / kFileName;
  int rc = -1;
  for (int attempt = 0;; ++attempt) {
    ensure_writable_directory(run_root);  // one message for a folder that cannot be made or written
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      if (errno == ENOENT && attempt < 10) continue;  // the folder was removed by a releasing holder
      throw IoError(fmt::format("{}: cannot create the lock file {}: {}", run_root.string(), path.string(),
                                std::strerror(errno)));
    }
    do {
      rc = ::flock(fd_, LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 || still_linked(fd_, path) || attempt >= 10) break;
    ::close(fd_);  // locked a file a releasing holder had just unlinked: take the new one
    fd_ = -1;
  }
  if (rc != 0) {
    const int err = errno;
    const std::string pid = err == EWOULDBLOCK ? holder_pid(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      throw IoError(fmt::format("{}: cannot lock {}: {}", run_root.string(), path.string(), std::strerror(err)));
    }
    throw ConfigError(
        fmt::format("{}: the run folder is in use by another trainer process ({}); wait for it to end, "
                    "or choose another experiment.name",
                    run_root.string(), pid.empty() ? std::string("PID not yet recorded") : "PID " + pid));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    // The lock holds regardless; only the PID in a second process's message would be missing.
  }
}

void RunLock::remove_if_unused() noexcept {
  if (created_.empty()) return;
  try {
    for (const auto& e : std::filesystem::directory_iterator(root_)) {
      if (e.path().filename() != kFileName) return;  // the run wrote something: keep the folder
    }
    std::error_code ec;
    std::filesystem::remove(root_ / kFileName, ec);  // still locked: see the header
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
