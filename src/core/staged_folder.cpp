#include "u3d/core/staged_folder.h"

#include <fmt/format.h>
#include <unistd.h>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"

namespace u3d {

namespace fs = std::filesystem;

namespace {

// ".<name>.<what>.<pid>" beside `dir` (the names remove_stale_temporaries() knows).
fs::path beside(const fs::path& dir, const char* what) {
  return dir.parent_path() / fmt::format(".{}.{}.{}", dir.filename().string(), what, ::getpid());
}

}  // namespace

StagedFolder::StagedFolder(fs::path dir) : dir_(std::move(dir)) {
  if (dir_.filename().empty()) dir_ = dir_.parent_path();  // "out/" names the folder "out"
  staged_ = beside(dir_, "tmp");
  std::error_code ec;
  fs::remove_all(staged_, ec);  // left by an earlier process of the same PID
  ensure_writable_directory(staged_);
}

StagedFolder::~StagedFolder() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staged_, ec);
}

void StagedFolder::commit() {
  const fs::path parent = dir_.parent_path().empty() ? fs::path(".") : dir_.parent_path();
  std::error_code ec;
  const fs::path old = beside(dir_, "old");
  const bool replacing = fs::exists(fs::symlink_status(dir_, ec));
  if (replacing) {
    fs::remove_all(old, ec);
    fs::rename(dir_, old, ec);
    if (ec) throw IoError(fmt::format("{}: cannot move the previous folder aside: {}", dir_.string(), ec.message()));
  }
  fs::rename(staged_, dir_, ec);
  if (ec) {
    std::error_code back;
    if (replacing) fs::rename(old, dir_, back);
    throw IoError(fmt::format("{}: cannot move the finished folder into place: {}", dir_.string(), ec.message()));
  }
  committed_ = true;
  if (replacing) fs::remove_all(old, ec);
  fsync_directory(parent);
}

}  // namespace u3d
