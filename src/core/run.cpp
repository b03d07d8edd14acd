#include "u3d/run.h"

#include <ATen/Parallel.h>

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
