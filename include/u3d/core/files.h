// File-system helpers: crash-safe writes and checks with messages that name the path.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace u3d {

namespace fs = std::filesystem;

// Writes `path` so that it either keeps its old content or holds the whole new content, never a
// mix: the bytes go to a temporary file in the same folder, which is fsynced, renamed over `path`,
// and the folder is fsynced. `write` receives a sink that appends bytes. On any failure the
// temporary file is removed, the old file is untouched, and IoError names the path and the free
// space left on its file system. `before_rename`, when given, runs after the temporary file is
// complete and durable and before it is renamed into place (CheckpointStore records the hash in its
// manifest there); if it throws, the temporary file is removed and the old file stays.
using ByteSink = std::function<void(const void* data, size_t size)>;
void write_file_atomic(const fs::path& path, const std::function<void(const ByteSink&)>& write,
                       const std::function<void()>& before_rename = nullptr);
void write_file_atomic(const fs::path& path, std::string_view content);

// Removes the temporary files write_file_atomic left in `dir` (".<name>.tmp.<pid>.<n>"), staged
// HDF5/NIfTI files (".<name>.partial.<pid>...") and staged folders (".<name>.tmp.<pid>",
// ".<name>.old.<pid>") when the process <pid> no longer runs (killed mid-write). Returns how many
// were removed.
int remove_stale_temporaries(const fs::path& dir);

// fsyncs a folder so that a rename inside it is durable.
void fsync_directory(const fs::path& dir);

// The last step of a staged write whose writer closed `tmp` itself (HDF5, NIfTI): fsyncs `tmp`,
// renames it to `path` and fsyncs the folder. IoError naming `path` when the rename fails.
void commit_staged_file(const fs::path& tmp, const fs::path& path);

// IoError when `dir` or a folder above it is a symbolic link that leads nowhere (its target is
// missing, or a loop), naming the link and its target, where creating the folder would fail with a
// bare "File exists".
void check_no_dangling_link(const fs::path& dir);

// Creates `dir` (and parents) and checks that a file can be created in it; IoError otherwise (a
// dangling link on the way named as such: check_no_dangling_link).
void ensure_writable_directory(const fs::path& dir);

// Whole file as a string; IoError naming the path when it cannot be read.
std::string read_file(const fs::path& path);

// Free bytes on the file system holding `path` (or its nearest existing parent); -1 if unknown.
int64_t free_bytes(const fs::path& path);
// Host memory a new allocation can take without swapping (MemAvailable of /proc/meminfo); -1 if unknown.
int64_t host_available_bytes();
// "12.3 GB" style.
std::string human_bytes(double bytes);

}  // namespace u3d
