// Shared helpers for the test suites: temporary folders, running the real `trainer` binary, and
// small phantom datasets and configs.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "u3d/data/batch.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace fs = std::filesystem;
}

namespace u3d::test {

// Base of the helpers below that own a folder, a setting or a process: neither copied nor assigned.
class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir : NonCopyable {
 public:
  TempDir();
  ~TempDir();
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// TF32 off for CUDA matmuls and convolutions while alive, then the previous settings back. For
// CPU-versus-GPU equality checks: TF32 rounds operands to 10 mantissa bits (relative errors near
// 1e-3), which would hide real differences behind a loose tolerance.
class NoTf32 : NonCopyable {
 public:
  NoTf32();
  ~NoTf32();

 private:
  bool cublas_, cudnn_;
};

// training.deterministic's switches (set_deterministic, core/run.h: deterministic algorithms too,
// as the trainer runs) while alive, then all off again.
class Deterministic : NonCopyable {
 public:
  Deterministic();
  ~Deterministic();
};

fs::path trainer_path();
fs::path source_dir();
// Runs the trainer binary with `args` (each passed as one argument) in folder `cwd`.
CommandResult run_trainer(const std::vector<std::string>& args, const fs::path& cwd);

// Phantom dataset (format v1) at `path`: `cases` cases of size^3 (val: a quarter, at least one).
void make_phantom(const fs::path& path, Task task, int64_t cases = 6, int64_t size = 16, uint64_t seed = 0);

// A small, fast config (YAML text) for a dataset made by make_phantom: 2 levels, 4 filters,
// patch 16, deterministic. `extra` is appended verbatim (more sections) and may override nothing:
// use overrides for changes of keys already present.
std::string tiny_config(const fs::path& dataset, const std::string& name, Task task = Task::kDose);

// A trainer process started with fork/exec, for tests that signal or kill it at chosen moments.
// Its stdout and stderr go to `log` (default: <cwd>/trainer-<n>.out). The destructor kills
// (SIGKILL) and reaps a process still running.
struct ProcessOptions {
  std::map<std::string, std::string> env;  // set in the child before exec
  uint64_t file_size_limit = 0;            // RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes fail with EFBIG)
  uint64_t address_space_limit = 0;        // RLIMIT_AS in bytes
  bool ignore_sighup = false;              // as under nohup (else SIGHUP, SIGINT, SIGTERM start at their defaults)
  fs::path log;
  fs::path program;  // the executable to run with the args (default: the trainer)
};
class TrainerProcess : NonCopyable {
 public:
  TrainerProcess(const std::vector<std::string>& args, const fs::path& cwd, ProcessOptions options = {});
  ~TrainerProcess();
  int pid() const { return pid_; }
  void signal(int sig);
  bool running();
  // Exit code (128 + signal when killed); fails the test and kills the process after the timeout.
  int wait(double timeout_seconds = 120);
  // Polls `ready` every millisecond; false when the process exits first or the timeout passes.
  bool wait_until(const std::function<bool()>& ready, double timeout_seconds = 60);
  std::string output() const;

 private:
  int pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  fs::path log_;
};

// Builds the network a checkpoint was trained with and loads it on the CPU (throws when it cannot).
Network load_network(const fs::path& checkpoint);
// Its parameters ("name") and buffers ("buffer:name"), on the CPU.
std::map<std::string, torch::Tensor> checkpoint_tensors(const fs::path& checkpoint);
// Every parameter and buffer of checkpoint `a` against `b`'s: bit for bit when `tolerance` is 0,
// else within `tolerance` relative to b's largest magnitude per tensor.
void expect_same_weights(const fs::path& a, const fs::path& b, double tolerance = 0);

// The Python of the torch venv (torch.distributed.run, the wheel's launcher): U3D_TORCH_PYTHON,
// which ctest sets to the venv this build used; nullopt when unset or missing.
std::optional<fs::path> torch_python();
// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
int free_tcp_port();

void write_text(const fs::path& path, const std::string& text);
std::string read_text(const fs::path& path);
// Rows of a CSV file, each a map from header to value.
std::vector<std::map<std::string, std::string>> read_csv(const fs::path& path);

// Two batches are identical: cases, image, target and mask (`what` names the comparison on failure).
inline void expect_same_batch(const Batch& a, const Batch& b, const std::string& what) {
  EXPECT_EQ(a.cases, b.cases) << what;
  EXPECT_TRUE(torch::equal(a.image, b.image)) << what;
  EXPECT_TRUE(torch::equal(a.target, b.target)) << what;
  EXPECT_TRUE(torch::equal(a.mask, b.mask)) << what;
}

// The message of the E that fn throws, or "no error".
template <class E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

// ../shared/data when present (OpenKBP sample); std::nullopt otherwise.
std::optional<fs::path> shared_data_dir();
// Unpacks shared_data_dir()/openkbp-sample.tar.xz into `dest` (tar -xJf) and returns
// dest/provided-data; std::nullopt when the sample is absent (tests then GTEST_SKIP).
std::optional<fs::path> unpack_openkbp_sample(const fs::path& dest);

}  // namespace u3d::test
