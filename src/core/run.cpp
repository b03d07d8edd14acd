#include "u3d/core/run.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <dlfcn.h>
#include <sys/resource.h>

#include <cstdlib>
#include <thread>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/parallel.h"
#include "u3d/core/thread_budget.h"

namespace u3d {

RunPaths::RunPaths(const Config& cfg) {
  root = std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name;
  if (const auto fold = fold_number(cfg)) root /= "fold_" + std::to_string(*fold);
  checkpoints = root / "checkpoints";
  predictions = root / "predictions";
  config = root / "config.yaml";
  log = root / "train.log";
  metrics = root / "metrics.csv";
}

void check_machine_limits(const Config& cfg) {
  const int64_t limit = max_threads();
  auto check_threads = [&](const std::string& key, int64_t value) {
    if (value > limit) {
      throw ConfigError(
          fmt::format("{}: {}: {} threads is more than this machine allows: at most {} ({} per core, {} "
                      "cores); 0 picks a good number",
                      key_origin(cfg, key), key, value, limit, kMaxThreadsPerCore, core_count()));
    }
  };
  check_threads("training.threads", cfg.training.threads);
  check_threads("data.workers", cfg.data.workers);
  if (cfg.data.prefetch > kMaxPrefetch) {
    throw ConfigError(
        fmt::format("{}: data.prefetch: {} batches ahead is more than allowed: at most {}; 0 picks twice "
                    "data.workers",
                    key_origin(cfg, "data.prefetch"), cfg.data.prefetch, kMaxPrefetch));
  }
}

int64_t host_threads(const Config& cfg) { return thread_budget(cfg, trains_on_cuda(cfg)).intra_op; }

int64_t loading_threads(const Config& cfg) {
  if (cfg.training.threads > 0) return cfg.training.threads;
  return thread_budget(cfg, false).cores;  // this process's share of the node's cores
}

int64_t data_workers(const Config& cfg) { return thread_budget(cfg, trains_on_cuda(cfg)).workers; }

void use_one_intra_op_thread() {
  // First let ATen initialise this thread's settings (it would otherwise reset them on its first
  // parallel op), then set the calling thread's OpenMP team size in the OpenMP runtime LibTorch
  // loaded (looked up at run time: the wheel bundles its own libgomp).
  (void)at::get_num_threads();
  using SetThreads = void (*)(int);
  static const auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_threads) set_threads(1);
}

void prepare_deterministic_cuda() {
  // cuBLAS picks its workspace when its first handle is made; without a fixed workspace every cuBLAS
  // call throws under deterministic algorithms. The user's own setting wins.
  if (std::getenv("CUBLAS_WORKSPACE_CONFIG") == nullptr)
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
}

Runtime init_runtime(const Config& cfg) {
  if (cfg.training.deterministic) prepare_deterministic_cuda();  // before CUDA initialises
  Runtime rt;
  const bool cuda = torch::cuda::is_available();
  const LaunchEnv& launch = launch_env();
  const auto gpu = static_cast<c10::DeviceIndex>(launch.local_rank);  // cuda:LOCAL_RANK (0 for one process)
  switch (cfg.training.device) {
    case Device::kCpu: rt.device = torch::kCPU; break;
    case Device::kCuda:
      if (!cuda) throw ConfigError("training.device: cuda was asked for, but no CUDA device is available");
      rt.device = torch::Device(torch::kCUDA, gpu);
      break;
    case Device::kAuto: rt.device = cuda ? torch::Device(torch::kCUDA, gpu) : torch::Device(torch::kCPU); break;
  }
  if (rt.device.is_cuda()) {
    const auto count = static_cast<int64_t>(torch::cuda::device_count());
    if (launch.local_rank >= count) {
      throw ConfigError(
          fmt::format("{}: {} processes on this node but {} CUDA device(s): one GPU per process "
                      "(NCCL refuses two ranks on one GPU); start at most {} per node",
                      launch.describe(), launch.local_world_size, count, count));
    }
    c10::cuda::set_device(gpu);  // code that asks for the current device gets this one
  }
  rt.threads = host_threads(cfg);
  at::set_num_threads(static_cast<int>(rt.threads));
  torch::manual_seed(static_cast<uint64_t>(cfg.experiment.seed));
  set_deterministic(cfg.training.deterministic);
  return rt;
}

void set_deterministic(bool on) {
  if (on) prepare_deterministic_cuda();
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(on, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(on);
  ctx.setBenchmarkCuDNN(!on);
  ctx.setAllowTF32CuBLAS(!on);
  ctx.setAllowTF32CuDNN(!on);
}

void init_cuda_allocator() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }

int64_t peak_memory_bytes(const torch::Device& device, int64_t* total) {
  if (total) *total = 0;
  if (device.is_cuda()) {
    init_cuda_allocator();
    const auto index = device.has_index() ? device.index() : 0;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    if (total) {
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) *total = static_cast<int64_t>(total_bytes);
    }
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // kB on Linux
}

GpuMemoryPeaks gpu_memory_peaks(const torch::Device& device) {
  GpuMemoryPeaks peaks;
  if (!device.is_cuda()) return peaks;
  init_cuda_allocator();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
  const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  peaks.allocated = stats.allocated_bytes[all].peak;
  peaks.reserved = stats.reserved_bytes[all].peak;
  return peaks;
}

int64_t gpu_memory_in_use(const torch::Device& device, int64_t* total) {
  if (total) *total = 0;
  if (!device.is_cuda()) return -1;
  init_cuda_allocator();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
  if (total) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) *total = static_cast<int64_t>(total_bytes);
  }
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) || dynamic_cast<const std::bad_alloc*>(&e)) return true;
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) {
    const std::string& m = c10e->msg();
    return m.find("can't allocate memory") != std::string::npos || m.find("not enough memory") != std::string::npos ||
           m.find("out of memory") != std::string::npos;
  }
  return false;
}

std::string out_of_memory_message(const Config& cfg, const torch::Device& device, const std::string& stage,
                                  const std::string& precision) {
  int64_t total = 0;
  const int64_t peak = peak_memory_bytes(device, &total);
  const auto& p = cfg.data.patch_size;
  const std::string memory = device.is_cuda() ? "GPU memory" : "host memory";
  return fmt::format(
      "out of {} during the {} on {}: data.batch_size = {}, data.patch_size = [{}, {}, {}], precision {}, peak {}{}; "
      "lower data.batch_size or data.patch_size (each halving of a patch edge halves the activations), or "
      "model.base_filters / model.levels{}",
      memory, stage, device.str(), cfg.data.batch_size, p[0], p[1], p[2], precision,
      human_bytes(static_cast<double>(peak)),
      total > 0 ? fmt::format(" of {}", human_bytes(static_cast<double>(total))) : "",
      precision == "fp32" && device.is_cuda() ? ", or train in bf16 where the build offers it" : "");
}

}  // namespace u3d
