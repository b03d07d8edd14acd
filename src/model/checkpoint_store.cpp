#include "u3d/model/checkpoint_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/sha256.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_manifest.h"

namespace u3d {

CheckpointStore::CheckpointStore(std::filesystem::path dir, int64_t keep_last)
    : dir_(std::move(dir)), keep_last_(std::max<int64_t>(2, keep_last)) {}

std::filesystem::path CheckpointStore::periodic_path(int64_t epoch) const {
  return dir_ / fmt::format("epoch_{:04d}.pt", epoch);
}

std::filesystem::path CheckpointStore::step_path(int64_t epoch, int64_t step) const {
  return dir_ / fmt::format("epoch_{:04d}_step_{:06d}.pt", epoch, step);
}

std::vector<std::filesystem::path> CheckpointStore::periodic() const {
  static const std::regex pattern(R"(epoch_(\d+)(?:_step_(\d+))?\.pt)");
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return {};
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, pattern)) {
      const int64_t epoch = std::stoll(m[1].str());
      const int64_t step = m[2].matched ? std::stoll(m[2].str()) : INT64_MAX;  // epoch end sorts after its steps
      found.push_back({{epoch, step}, entry.path()});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::filesystem::path> CheckpointStore::latest() const {
  const auto all = periodic();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void CheckpointStore::commit(const std::filesystem::path& path,
                             const std::function<void(const ByteSink&)>& write) const {
  commit_checkpoint_file(dir_, path, write);
}

Verification CheckpointStore::verify(const std::filesystem::path& path) const {
  Verification v;
  std::error_code ec;
  const auto folder = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  const auto manifest = folder / kManifestName;
  if (!std::filesystem::exists(path, ec)) {
    v.status = Verification::Status::kMissing;
    v.detail = fmt::format("{}: checkpoint not found", path.string());
    return v;
  }
  const auto entries = read_checkpoint_manifest(manifest);
  if (!entries) {
    v.status = Verification::Status::kNoManifest;
    v.detail = fmt::format("{}: no {} beside it, so it cannot be verified", path.string(), kManifestName);
    return v;
  }
  const std::string name = path.filename().string();
  std::vector<std::string> listed;
  for (const auto& e : *entries) {
    if (e.name == name) listed.push_back(e.hash);
  }
  if (listed.empty()) {
    v.status = Verification::Status::kUnlisted;
    v.detail = fmt::format("{}: not listed in {}", path.string(), manifest.string());
    return v;
  }
  std::string actual;
  try {
    actual = sha256_file(path);
  } catch (const IoError& e) {
    v.status = Verification::Status::kMismatch;
    v.detail = e.what();
    return v;
  }
  if (std::find(listed.begin(), listed.end(), actual) == listed.end()) {
    v.status = Verification::Status::kMismatch;
    v.detail = fmt::format(
        "{}: content does not match its SHA-256 in {} (truncated or corrupt: {} bytes, sha256 {}..., "
        "listed {}...)",
        path.string(), kManifestName, std::filesystem::file_size(path, ec), actual.substr(0, 12),
        listed.back().substr(0, 12));
  }
  return v;
}

std::optional<std::filesystem::path> CheckpointStore::newest_valid() const {
  const auto all = periodic();
  bool warned_no_manifest = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const Verification v = verify(*it);
    if (v.status == Verification::Status::kNoManifest) {
      if (!warned_no_manifest) {
        spdlog::warn("{}: no {}; checkpoints cannot be verified, using the newest that opens", dir_.string(),
                     kManifestName);
        warned_no_manifest = true;
      }
      try {
        read_checkpoint_info(*it);
        return *it;
      } catch (const CheckpointError& e) {
        spdlog::warn("{}; skipping it", e.what());
        continue;
      }
    }
    if (!v.verified()) {
      spdlog::warn("{}; skipping it for an older checkpoint", v.detail);
      continue;
    }
    return *it;  // the bytes the serializer wrote: it opens
  }
  return std::nullopt;
}

void CheckpointStore::prune() const {
  const auto all = periodic();
  const auto entries = read_checkpoint_manifest(manifest_path());
  std::set<std::string> listed;
  if (entries) {
    for (const auto& e : *entries) listed.insert(e.name);
  }
  int64_t kept = 0;
  bool deleted = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const bool counts = !entries || listed.count(it->filename().string()) > 0;
    if (!counts) continue;  // not committed by the protocol: neither counted nor deleted
    if (kept < keep_last_) {
      ++kept;
      continue;
    }
    checkpoint_test_delay();
    std::error_code ec;
    std::filesystem::remove(*it, ec);
    if (ec) {
      spdlog::warn("could not delete old checkpoint {}: {}", it->string(), ec.message());
    } else {
      deleted = true;
    }
  }
  if (deleted && entries) {
    std::vector<ManifestEntry> kept_entries;
    for (const auto& e : *entries) {
      std::error_code ec;
      if (std::filesystem::exists(dir_ / e.name, ec)) kept_entries.push_back(e);
    }
    try {
      write_checkpoint_manifest(manifest_path(), kept_entries);
    } catch (const IoError& e) {
      spdlog::warn("could not tidy {}: {}", manifest_path().string(), e.what());
    }
  }
}

void CheckpointStore::tidy_manifest() const {
  const auto entries = read_checkpoint_manifest(manifest_path());
  if (!entries) return;
  std::map<std::string, std::vector<std::string>> hashes;  // name -> its listed hashes
  for (const auto& e : *entries) hashes[e.name].push_back(e.hash);
  std::vector<ManifestEntry> kept;
  for (const auto& [name, listed] : hashes) {
    std::error_code ec;
    if (!std::filesystem::exists(dir_ / name, ec)) continue;  // never renamed into place, or pruned
    if (listed.size() == 1) {
      kept.push_back({listed.front(), name});
      continue;
    }
    std::string actual;  // a kill between steps 2 and 4 of a commit: keep the hash the file has
    try {
      actual = sha256_file(dir_ / name);
    } catch (const IoError&) {
    }
    if (std::find(listed.begin(), listed.end(), actual) != listed.end()) {
      kept.push_back({actual, name});
    } else {  // the file matches none: keep them all, so that verification reports it
      for (const auto& h : listed) kept.push_back({h, name});
    }
  }
  if (kept.size() == entries->size()) return;
  try {
    write_checkpoint_manifest(manifest_path(), kept);
    spdlog::info("{}: {} stale line(s) of an interrupted checkpoint write removed", manifest_path().string(),
                 entries->size() - kept.size());
  } catch (const IoError& e) {
    spdlog::warn("could not tidy {}: {}", manifest_path().string(), e.what());
  }
}

void CheckpointStore::remove_stale_temporaries() const {
  const int n = u3d::remove_stale_temporaries(dir_);
  if (n > 0) spdlog::info("removed {} temporary file(s) left in {} by an interrupted write", n, dir_.string());
}

std::filesystem::path CheckpointStore::resolve(const std::string& which) const {
  auto newest_or_throw = [&]() {
    if (auto p = newest_valid()) return *p;
    const auto all = periodic();
    if (all.empty()) {
      throw CheckpointError(fmt::format("{}: no checkpoint found; train first (trainer --config ...)", dir_.string()),
                            kExitUsage);
    }
    throw CheckpointError(fmt::format("{}: none of the {} checkpoints is intact (see the warnings above); nothing to "
                                      "continue from",
                                      dir_.string(), all.size()),
                          kExitUsage);
  };
  if (which == "last" || which.empty()) return newest_or_throw();
  std::error_code ec;
  if (which == "best") {
    if (std::filesystem::exists(best_path(), ec)) {
      const Verification v = verify(best_path());
      if (v.status == Verification::Status::kNoManifest) spdlog::warn("{}; using it unverified", v.detail);
      if (v.verified() || v.status == Verification::Status::kNoManifest) return best_path();
      spdlog::warn("{}; using the newest intact checkpoint instead", v.detail);
      return newest_or_throw();
    }
    const auto p = newest_or_throw();
    spdlog::warn("{} does not exist; using the newest checkpoint {}", best_path().string(), p.string());
    return p;
  }
  if (!std::filesystem::exists(which, ec)) {
    throw CheckpointError(fmt::format("{}: checkpoint not found", which), kExitUsage);
  }
  if (std::filesystem::is_directory(which, ec)) {
    throw CheckpointError(fmt::format("{}: is a folder, expected a checkpoint file (or --resume without a path for "
                                      "the newest one)",
                                      which),
                          kExitUsage);
  }
  const Verification v = verify(which);
  if (v.status == Verification::Status::kMismatch) {
    throw CheckpointError(
        fmt::format("{}; choose another checkpoint, or --resume without a path for the newest "
                    "intact one",
                    v.detail));
  }
  if (!v.verified()) spdlog::warn("{}; loading it unverified", v.detail);
  return which;
}

}  // namespace u3d
