#include "u3d/core/thread_budget.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>

#include "u3d/core/launch_env.h"
#include "u3d/core/parallel.h"

namespace u3d {

ThreadBudget split_threads(int64_t cores, int64_t threads, int64_t workers, bool cuda) {
  ThreadBudget b;
  b.cores = std::max<int64_t>(1, cores);
  b.set_threads = threads > 0;
  b.set_workers = workers > 0;
  const int64_t budget = b.cores - 1;  // one core left for the OS, the main loop's bookkeeping, the user
  if (b.set_threads && b.set_workers) {
    b.intra_op = threads;
    b.workers = workers;
  } else if (b.set_threads) {
    b.intra_op = threads;
    b.workers = std::max<int64_t>(1, budget - threads);
  } else if (b.set_workers) {
    b.workers = workers;
    b.intra_op = std::max<int64_t>(1, budget - workers);
  } else {
    const int64_t minor = std::max<int64_t>(1, (budget + 3) / 4);  // a quarter, rounded up
    const int64_t major = std::max<int64_t>(1, budget - minor);
    b.intra_op = cuda ? minor : major;
    b.workers = cuda ? major : minor;
  }
  return b;
}

std::string ThreadBudget::line() const {
  const int64_t free = cores - intra_op - workers;
  const std::string rest = free > 0    ? fmt::format("leaves {} free", free)
                           : free == 0 ? "leaves none free: at least 1 each"
                                       : fmt::format("{} over the cores", -free);
  return fmt::format("threads: {} intra-op + {} loader worker{} of {} core{} ({})", intra_op, workers,
                     workers == 1 ? "" : "s", cores, cores == 1 ? "" : "s", rest);
}

std::string ThreadBudget::warning() const {
  if (!over() || !(set_threads || set_workers)) return "";
  return fmt::format(
      "training.threads {} + data.workers {} = {} threads on {} core{}: the machine is oversubscribed; set both "
      "to 0 for the default ({} in all)",
      intra_op, workers, intra_op + workers, cores, cores == 1 ? "" : "s", std::max<int64_t>(2, cores - 1));
}

bool trains_on_cuda(const Config& cfg) {
  switch (cfg.training.device) {
    case Device::kCpu: return false;
    case Device::kCuda: return true;
    case Device::kAuto: return torch::cuda::is_available();
  }
  return false;
}

ThreadBudget thread_budget(const Config& cfg, bool cuda) {
  // This process's share of the node's cores (torchrun/srun start local_world_size processes per node).
  const int64_t cores = std::max<int64_t>(1, core_count() / launch_env().local_world_size);
  return split_threads(cores, cfg.training.threads, cfg.data.workers, cuda);
}

}  // namespace u3d
