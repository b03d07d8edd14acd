#include "u3d/core/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string space_note(const fs::path& path) {
  const int64_t free = free_bytes(path);
  return free >= 0 ? fmt::format(" ({} free on its file system)", human_bytes(static_cast<double>(free))) : "";
}

// Unique temporary name beside `path`: "<name>.tmp.<pid>.<n>".
fs::path temporary_beside(const fs::path& path) {
  static std::atomic<uint64_t> counter{0};
  return path.parent_path() / fmt::format(".{}.tmp.{}.{}", path.filename().string(), ::getpid(), counter.fetch_add(1));
}

}  // namespace

void fsync_directory(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open folder to sync: {}", d.string(), errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("{}: fsync of folder failed: {}", d.string(), errno_text(err)));
}

void write_file_atomic(const fs::path& path, const std::function<void(const ByteSink&)>& write,
                       const std::function<void()>& before_rename) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const fs::path tmp = temporary_beside(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw IoError(fmt::format("{}: cannot create a file in {}: {}{}", path.string(), dir.string(), errno_text(err),
                              space_note(dir)));
  }
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: {}: {}{}", path.string(), what, errno_text(err), space_note(dir)));
  };
  const ByteSink sink = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        // Cleanup (close, unlink) happens in the catch below, once.
        throw IoError(fmt::format("{}: write failed: {}{}", path.string(), errno_text(errno), space_note(dir)));
      }
      p += n;
      size -= static_cast<size_t>(n);
    }
  };
  try {
    write(sink);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::fsync(fd) != 0) fail("fsync failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: close failed: {}{}", path.string(), errno_text(err), space_note(dir)));
  }
  if (before_rename) {
    try {
      before_rename();
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: rename into place failed: {}", path.string(), errno_text(err)));
  }
  fsync_directory(dir);
}

void commit_staged_file(const fs::path& tmp, const fs::path& path) {
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw IoError(fmt::format("{}: cannot open the staged file to flush it: {}", tmp.string(), errno_text(errno)));
  const int rc = ::fsync(fd);  // as write_file_atomic: a file that may not be on disk is not committed
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    throw IoError(fmt::format("{}: fsync failed: {}{}", path.string(), errno_text(err), space_note(path)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    throw IoError(fmt::format("{}: cannot move the finished file into place: {}", path.string(), errno_text(errno)));
  }
  fsync_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

int remove_stale_temporaries(const fs::path& dir) {
  // ".<name>.tmp.<pid>.<n>" (write_file_atomic), ".<name>.partial.<pid>[<ending>]" (staged HDF5 and
  // NIfTI files), ".<name>.tmp.<pid>" and ".<name>.old.<pid>" (staged folders, OpenKBP submissions).
  static const std::regex pattern(R"(\..+\.(?:tmp|partial|old)\.(\d+)(?:\..*)?)");
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    const pid_t pid = static_cast<pid_t>(std::stoll(m[1].str()));
    const bool alive = pid == ::getpid() || ::kill(pid, 0) == 0 || errno == EPERM;
    if (alive) continue;
    std::error_code rec;
    if (fs::remove_all(entry.path(), rec) > 0) ++removed;
  }
  return removed;
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(content.data(), content.size()); });
}

void check_no_dangling_link(const fs::path& dir) {
  std::error_code ec;
  for (auto p = dir; !p.empty(); p = p.parent_path()) {
    if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(p, ec)) {
      const auto target = fs::read_symlink(p, ec);
      throw IoError(
          fmt::format("{}: is a symbolic link to {}, which does not exist (or is a loop of links); "
                      "create that folder or remove the link",
                      p.string(), target.string()));
    }
    if (p == p.parent_path()) break;
  }
}

void ensure_writable_directory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) check_no_dangling_link(dir);  // "File exists" from a link that leads nowhere
  if (ec) throw IoError(fmt::format("{}: cannot create folder: {}", dir.string(), ec.message()));
  if (!fs::is_directory(dir, ec)) throw IoError(fmt::format("{}: exists and is not a folder", dir.string()));
  const fs::path probe = temporary_beside(dir / "write-probe");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw IoError(fmt::format("{}: folder is not writable: {}{}", dir.string(), errno_text(err), space_note(dir)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

int64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (meminfo >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return -1;
}

int64_t free_bytes(const fs::path& path) {
  fs::path p = path.empty() ? fs::path(".") : path;
  std::error_code ec;
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (p.empty()) p = ".";
  struct statvfs st {};
  if (::statvfs(p.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", bytes, units[u]) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace u3d
