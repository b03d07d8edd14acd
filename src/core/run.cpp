#include "u3d/run.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <thread>

#include "u3d/errors.h"

namespace u3d {

RunPaths::RunPaths(const Config& cfg) {
  root = std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name;
  checkpoints = root / "checkpoints";
  predictions = root / "predictions";
  config = root / "config.yaml";
  log = root / "train.log";
  metrics = root / "metrics.csv";
}

int64_t host_threads(const Config& cfg) {
  if (cfg.training.threads > 0) return cfg.training.threads;
  const int64_t cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max<int64_t>(1, cores - 1);
}

int64_t loading_threads(const Config& cfg) {
  if (cfg.training.threads > 0) return cfg.training.threads;
  return static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
}

int64_t data_workers(const Config& cfg) {
  if (cfg.data.workers > 0) return cfg.data.workers;
  const int64_t cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max<int64_t>(1, cores - 1);
}

void use_one_intra_op_thread() {
  // First let ATen initialise this thread's settings (it would otherwise reset them on its first
  // parallel op), then set the calling thread's OpenMP team size in the OpenMP runtime LibTorch
  // loaded (looked up at run time: the wheel bundles its own libgomp).
  (void)at::get_num_threads();
  using SetThreads = void (*)(int);
  static const auto set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set_threads) set_threads(1);
}

Runtime init_runtime(const Config& cfg) {
  Runtime rt;
  const bool cuda = torch::cuda::is_available();
  switch (cfg.training.device) {
    case Device::kCpu: rt.device = torch::kCPU; break;
    case Device::kCuda:
      if (!cuda) throw ConfigError("training.device: cuda was asked for, but no CUDA device is available");
      rt.device = torch::Device(torch::kCUDA, 0);
      break;
    case Device::kAuto: rt.device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU); break;
  }
  rt.threads = host_threads(cfg);
  at::set_num_threads(static_cast<int>(rt.threads));
  torch::manual_seed(static_cast<uint64_t>(cfg.experiment.seed));
  auto& ctx = at::globalContext();
  const bool det = cfg.training.deterministic;
  ctx.setDeterministicAlgorithms(det, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(det);
  ctx.setBenchmarkCuDNN(!det);
  ctx.setAllowTF32CuBLAS(!det);
  ctx.setAllowTF32CuDNN(!det);
  return rt;
}

}  // namespace u3d
