// The run folder and the process-wide runtime (device, threads, seeds, determinism).
//
//   <experiment.output_dir>/<experiment.name>/
//     config.yaml        resolved config (every key)
//     train.log          everything the console showed
//     metrics.csv        one row per epoch
//     checkpoints/       epoch_NNNN.pt (newest checkpoint.keep_last), best.pt
//     predictions/       <split>.h5 and <split>_metrics.csv from --predict-only
//
// With cross-validation (data.folds, experiment.fold K) the run folder is
// <output_dir>/<name>/fold_K, beside <name>/folds.json (data/folds.h) and <name>/ensemble/.
#pragma once
#include <torch/torch.h>

#include <filesystem>

#include "u3d/core/config.h"

namespace u3d {

struct RunPaths {
  std::filesystem::path root, checkpoints, predictions, config, log, metrics;
  explicit RunPaths(const Config& cfg);
};

struct Runtime {
  torch::Device device = torch::kCPU;
  int64_t threads = 1;
};

// Resolves training.device (ConfigError when cuda is asked for and absent), sets intra-op
// threads, seeds torch (CPU and CUDA) with experiment.seed, and applies training.deterministic
// (deterministic algorithms, no cuDNN autotuning, no TF32; prepare_deterministic_cuda() first).
// Under torchrun or srun (core/launch_env.h) each process binds cuda:LOCAL_RANK (made the current
// device; ConfigError when the node has fewer GPUs than processes) and the host threads of
// host_threads(), loading_threads() and data_workers() are the node's cores shared among its
// processes.
Runtime init_runtime(const Config& cfg);
// Sets CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the user set it: cuBLAS (the GPU sampler's matmul and
// bmm) is deterministic only with a fixed workspace, and PyTorch refuses every cuBLAS call under
// deterministic algorithms without it. Must run before the first cuBLAS handle is made.
void prepare_deterministic_cuda();
// training.deterministic's process-wide switches, as init_runtime applies them: deterministic
// algorithms (an op without a deterministic kernel throws), deterministic cuDNN without autotuning,
// no TF32; prepare_deterministic_cuda() first when on. The GPU tests call it to run the trainer's own
// deterministic path.
void set_deterministic(bool on);
// Intra-op threads (also parallel host work: loading the val cases): training.threads, or the
// share thread_budget() (core/thread_budget.h) leaves them beside the sampler threads.
int64_t host_threads(const Config& cfg);
// Threads that load the training cache at start-up: training.threads, or one per core.
int64_t loading_threads(const Config& cfg);
// Bounds the settings that start threads against this machine: training.threads and data.workers at
// most max_threads() (parallel.h: 4 per core), data.prefetch at most kMaxPrefetch. ConfigError
// naming the key, the value and the core count. Kept out of validate() on purpose: a checkpoint's
// config, made on a larger machine, must still load here (threads may change on resume).
inline constexpr int64_t kMaxPrefetch = 1024;
void check_machine_limits(const Config& cfg);
// Sampler threads: data.workers, or thread_budget()'s share: intra-op + workers <= cores - 1.
int64_t data_workers(const Config& cfg);
// Makes LibTorch CPU ops called from the current (helper) thread run on this thread alone. LibTorch's
// OpenMP pool is per calling thread: without this, every sampler or loading thread would start its
// own team of cores threads for each large op and oversubscribe the machine.
void use_one_intra_op_thread();

// Initialises CUDA and its caching allocator once per process (what the first CUDA tensor does). The
// allocator's statistics (peaks, resets) refuse a device before that ("Invalid device argument"), so
// every reader below calls it first; so do callers that reset the peaks before allocating anything.
void init_cuda_allocator();

// Peak memory so far: the CUDA caching allocator's peak on a CUDA device, else the process's peak
// resident set (host RAM). `total`, when given, receives the device's memory (0 when unknown).
int64_t peak_memory_bytes(const torch::Device& device, int64_t* total = nullptr);
// The CUDA caching allocator's peaks on `device` since the last reset: bytes handed to tensors
// (allocated) and bytes held from the driver (reserved: cached blocks and CUDA graphs' private
// pools too, what torch.cuda.max_memory_reserved reports). {-1, -1} on CPU.
struct GpuMemoryPeaks {
  int64_t allocated = -1, reserved = -1;
};
GpuMemoryPeaks gpu_memory_peaks(const torch::Device& device);
// GPU memory the caching allocator holds now (reserved, as nvidia-smi sees this process), and the
// device's total in `total` (0 when unknown); -1 on the CPU.
int64_t gpu_memory_in_use(const torch::Device& device, int64_t* total = nullptr);
// One line for an out-of-memory failure during `stage` ("training step", "validation"): device,
// batch size, patch size, precision, peak memory, and the settings that lower memory use.
// Whether `e` reports an allocation failure: c10::OutOfMemoryError (CUDA), the CPU allocator's
// "can't allocate memory" error, or std::bad_alloc.
bool is_out_of_memory(const std::exception& e);
std::string out_of_memory_message(const Config& cfg, const torch::Device& device, const std::string& stage,
                                  const std::string& precision = "fp32");

}  // namespace u3d
