// The manifest of a checkpoints/ folder and the commit that keeps it in step with the files.
//
// manifest.sha256 holds "<sha256>  <file>" lines, as sha256sum writes them (`cd checkpoints &&
// sha256sum -c manifest.sha256` checks them by hand). commit_checkpoint_file() is the commit protocol
// of model/checkpoint_store.h (its steps 1 to 4): save_checkpoint (model/checkpoint.h) and
// CheckpointStore::commit both commit through it, so writing a checkpoint needs nothing of the
// folder's other rules (file names, verification, pruning, the choice to resume from), and the
// store, which opens checkpoints, sits above what a checkpoint holds.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/files.h"

namespace u3d {

// The manifest's file name in a checkpoints/ folder.
inline constexpr const char* kCheckpointManifestName = "manifest.sha256";

// One line of a manifest: a file's SHA-256 (64 hex digits) and its name in the folder.
struct ManifestEntry {
  std::string hash, name;
};

// The lines of the manifest at `path` that are "<sha256> <name>" or "<sha256> *<name>" (others are
// skipped), in file order; std::nullopt when there is no manifest.
std::optional<std::vector<ManifestEntry>> read_checkpoint_manifest(const std::filesystem::path& path);
// Rewrites the manifest at `path` with `entries`, in order (write_file_atomic).
void write_checkpoint_manifest(const std::filesystem::path& path, const std::vector<ManifestEntry>& entries);

// Commits `path`, a file in `dir`, with the bytes `write` sends to its sink, by the protocol of
// model/checkpoint_store.h, updating dir/manifest.sha256. On failure: IoError naming the path and the
// free space, the old file and the manifest unchanged (or still listing the old hash), the temporary
// file removed.
void commit_checkpoint_file(const std::filesystem::path& dir, const std::filesystem::path& path,
                            const std::function<void(const ByteSink&)>& write);

// Test-only fault hook (faults.h): U3D_TEST_FAULTS=checkpoint_delay@N makes every checkpoint
// commit pause N ms after each chunk written and between the protocol steps, so a
// test can kill the process inside a checkpoint write. Unset: no delay.
void checkpoint_test_delay();

}  // namespace u3d
