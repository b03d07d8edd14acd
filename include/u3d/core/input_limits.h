// The checks every reader makes before it reads, each in one place:
// - check_input_file(): a file a user names (a config, a CSV, a JSON, a volume) is a regular file of
//   a sane size, so `--config /dev/zero`, a FIFO or a 40 GB "CSV" is refused at once instead of read
//   until memory runs out (read_file() in core/files.h applies it to every text file it reads);
// - declared_size_problem(): a volume whose header declares its shape (HDF5, TIFF, NIfTI) fits the
//   memory available, checked before anything is allocated (a forged header used to end in the
//   allocator's error or std::bad_alloc);
// - host_allocation_failure(): an allocation that failed anyway, recognised for a one-line message.
//
//   check_input_file("/dev/zero", kMaxConfigBytes, "a config file")
//       -> IoError "/dev/zero: is a character device; expected a config file (a regular file)"
//   declared_size_problem({500000, 500000, 1}, 4, "int")
//       -> "declares shape [500000, 500000, 1] (1.0 TB as int), more than the 12.3 GB of memory available; ..."
#pragma once
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace u3d {

// The largest text file read whole (CSV, JSON, YAML, manifests): 1 GiB.
inline constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;
// The largest config file (YAML): 16 MiB; configs are a few KB.
inline constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;

// Why `path` cannot be read as `kind` (with its article: "a config file"): "not found", "is a
// folder; expected a config file (a regular file)", "is a character device; ...", "is 2.1 GB, more
// than the 16.8 MB a config file may hold"; or "" when it is a regular file (symbolic links
// followed) of at most `max_bytes` (-1: any size).
std::string input_file_problem(const std::filesystem::path& path, int64_t max_bytes, std::string_view kind);
// IoError "<path>: <problem>" when input_file_problem() finds one; the file's size otherwise.
int64_t check_input_file(const std::filesystem::path& path, int64_t max_bytes, std::string_view kind = "a file");

// Why a volume of `shape` with elements of `element_bytes` (named `type_name` in the message)
// cannot be allocated here ("declares shape [...] (X as float), more than the Y of memory
// available; the file is damaged, or the volume is too large for this machine"), or "" when it fits
// (or the memory available is unknown).
std::string declared_size_problem(const std::vector<int64_t>& shape, int64_t element_bytes, std::string_view type_name);
// DataError "<what> <problem>" when declared_size_problem() finds one.
void check_declared_size(const std::string& what, const std::vector<int64_t>& shape, int64_t element_bytes,
                         std::string_view type_name);

// Whether `e` is a failed host allocation: std::bad_alloc, or LibTorch's CPU allocator ("[enforce
// fail at alloc_cpu.cpp] ... DefaultCPUAllocator: ... you tried to allocate N bytes"). The bytes asked
// for (0 when unknown), or nullopt for any other exception. Loaders and main() turn it into a line
// naming what was loading and the settings that shrink it, never the allocator's text.
std::optional<int64_t> host_allocation_failure(const std::exception& e);

}  // namespace u3d
