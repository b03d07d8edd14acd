#include "u3d/model/checkpoint_manifest.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "u3d/core/errors.h"
#include "u3d/core/faults.h"
#include "u3d/core/sha256.h"

namespace u3d {

std::optional<std::vector<ManifestEntry>> read_checkpoint_manifest(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::vector<ManifestEntry> entries;
  std::istringstream in(read_file(path));
  std::string line;
  static const std::regex pattern(R"(([0-9a-f]{64}) [ *](.+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, pattern)) entries.push_back({m[1].str(), m[2].str()});
  }
  return entries;
}

void write_checkpoint_manifest(const std::filesystem::path& path, const std::vector<ManifestEntry>& entries) {
  std::string text;
  for (const auto& e : entries) text += e.hash + "  " + e.name + "\n";
  write_file_atomic(path, text);
}

namespace {

int64_t test_delay_ms() {
  static const int64_t ms = TestFaults::from_env().checkpoint_delay_ms;  // checkpoint_delay@MS (faults.h)
  return ms;
}

}  // namespace

void checkpoint_test_delay() {
  if (const int64_t ms = test_delay_ms(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void commit_checkpoint_file(const std::filesystem::path& dir, const std::filesystem::path& path,
                            const std::function<void(const ByteSink&)>& write) {
  const std::filesystem::path manifest = dir / kCheckpointManifestName;
  const std::string name = path.filename().string();
  std::vector<ManifestEntry> entries = read_checkpoint_manifest(manifest).value_or(std::vector<ManifestEntry>{});
  Sha256 hash;
  std::string digest;
  size_t since_pause = 0;
  write_file_atomic(
      path,
      [&](const ByteSink& sink) {
        write([&](const void* data, size_t size) {
          hash.update(data, size);
          sink(data, size);
          since_pause += size;
          if (since_pause >= (size_t{64} << 10)) {  // test hook: a pause every 64 KiB
            since_pause = 0;
            checkpoint_test_delay();
          }
        });
      },
      /*before_rename=*/
      [&] {
        checkpoint_test_delay();
        digest = hash.hex();
        entries.push_back({digest, name});  // step 2: the old hash of `name` stays listed too
        write_checkpoint_manifest(manifest, entries);
        checkpoint_test_delay();
      });
  checkpoint_test_delay();
  // Step 4: only the new hash for `name`; entries of files that are gone dropped.
  std::vector<ManifestEntry> kept;
  for (const auto& e : entries) {
    std::error_code ec;
    const bool twice =
        std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return k.name == e.name && k.hash == e.hash; });
    if (!twice && (e.name == name ? e.hash == digest : std::filesystem::exists(dir / e.name, ec))) kept.push_back(e);
  }
  try {
    write_checkpoint_manifest(manifest, kept);
  } catch (const IoError& e) {
    // Harmless: the manifest still lists the new hash (and a stale one).
    spdlog::warn("could not tidy {}: {}", manifest.string(), e.what());
  }
}

}  // namespace u3d
