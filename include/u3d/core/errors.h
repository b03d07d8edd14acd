// Typed exceptions with context, and check macros for C-library calls.
//
// Every failure a user can cause ends as one of these, caught once in main() and mapped to an exit
// code: 0 success, 1 runtime failure, 2 usage or configuration error (see README "Exit codes").
// Messages are one line and name the file, key or case and what was expected.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace u3d {

enum ExitCode : int { kExitOk = 0, kExitRuntime = 1, kExitUsage = 2 };

// The one line of an exception for a message: c10::Error's text without its C++ backtrace, and
// the first line of anything else.
std::string error_line(const std::exception& e);

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, int exit_code) : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Wrong command line.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& m) : Error(m, kExitUsage) {}
};
// Bad or inconsistent configuration: unknown key, wrong type, out of range, or a config value that
// does not fit the dataset (missing split, patch larger than the volume).
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& m) : Error(m, kExitUsage) {}
};
// A dataset file whose content is wrong: missing fields, shape mismatch, non-finite values.
class DataError : public Error {
 public:
  explicit DataError(const std::string& m) : Error(m, kExitRuntime) {}
};
// File-system and HDF5 failures (cannot create, write, read).
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(m, kExitRuntime) {}
};
// A checkpoint that is missing where one is required (exit 2: the request cannot be met), or one
// that cannot be read (exit 1).
class CheckpointError : public Error {
 public:
  CheckpointError(const std::string& m, int exit_code = kExitRuntime) : Error(m, exit_code) {}
};
// Training that cannot go on: too many consecutive non-finite steps, out of memory. The message
// says what happened, what was kept (the last good checkpoint) and which settings to change.
class TrainingError : public Error {
 public:
  explicit TrainingError(const std::string& m) : Error(m, kExitRuntime) {}
};
// A stop signal (SIGINT, SIGTERM, SIGHUP) ended a command that has nothing to resume from (synth,
// import, predict-only): what it was writing was removed on the way out. Exit 128 + signal.
class StoppedError : public Error {
 public:
  StoppedError(const std::string& m, int signal) : Error(m, 128 + signal) {}
};
// Data-parallel training (train/distributed.h): a collective failed because a rank crashed or hung.
class DistributedError : public Error {
 public:
  explicit DistributedError(const std::string& m) : Error(m, kExitRuntime) {}
};
// CUDA runtime failures.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& m) : Error(m, kExitRuntime) {}
};

}  // namespace u3d

// Throws u3d::IoError naming the call, its context and file:line when an HDF5 call returns < 0.
#define U3D_CHECK_H5(expr, context)                                                                               \
  do {                                                                                                            \
    if ((expr) < 0) {                                                                                             \
      throw ::u3d::IoError(fmt::format("{}: HDF5 call {} failed ({}:{})", (context), #expr, __FILE__, __LINE__)); \
    }                                                                                                             \
  } while (0)

// Throws u3d::CudaError with the CUDA error string and file:line when a CUDA runtime call fails.
#define U3D_CHECK_CUDA(expr)                                                                         \
  do {                                                                                               \
    const auto u3d_cuda_status_ = (expr);                                                            \
    if (u3d_cuda_status_ != cudaSuccess) {                                                           \
      throw ::u3d::CudaError(fmt::format("CUDA call {} failed: {} ({}:{})", #expr,                   \
                                         cudaGetErrorString(u3d_cuda_status_), __FILE__, __LINE__)); \
    }                                                                                                \
  } while (0)
