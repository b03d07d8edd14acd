// How a training process shares its CPU cores between LibTorch's intra-op threads
// (training.threads) and the sampler threads that fill the batch queue (data.workers): the one
// place the defaults are resolved (host_threads() and data_workers(), core/run.h, ask it).
//
// The rule, for a process with C cores (the node's cores shared among torchrun/srun's processes):
// the two together never exceed C - 1, at least 1 each (so 1 and 2 cores get 1 + 1).
//   - both 0 (default): a quarter of C - 1 (rounded up, at least 1) to the minor user, the rest
//     (at least 1) to the major one: on the CPU the network is the work (loader workers get the
//     quarter), on CUDA the loader is (intra-op threads get the quarter). 16 cores: 11 intra-op +
//     4 workers (CPU), 4 + 11 (CUDA); 8 cores: 5 + 2 (CPU);
//   - one of them set: the other gets what is left of C - 1 (at least 1);
//   - both set: kept as given; over C, the start banner warns.
#pragma once
#include <cstdint>
#include <string>

#include "u3d/core/config.h"

namespace u3d {

struct ThreadBudget {
  int64_t cores = 1;                              // this process's cores
  int64_t intra_op = 1;                           // LibTorch intra-op threads
  int64_t workers = 1;                            // sampler (loader) threads
  bool set_threads = false, set_workers = false;  // given in the config (not resolved from 0)
  // intra_op + workers is more than the cores (only when both were set, or 1 and 2 cores).
  bool over() const { return intra_op + workers > cores; }
  // "threads: 12 intra-op + 3 loader workers of 16 cores (leaves 1 free)"
  std::string line() const;
  // The warning for settings over the cores, naming both keys; "" when not over or not both set.
  std::string warning() const;
};

// The rule above for `cores` cores, training.threads `threads` and data.workers `workers` (0: resolve).
ThreadBudget split_threads(int64_t cores, int64_t threads, int64_t workers, bool cuda);
// The rule for this process: its share of the node's cores, training on CUDA or not.
ThreadBudget thread_budget(const Config& cfg, bool cuda);
// Whether training.device resolves to CUDA here (auto: a CUDA device is available).
bool trains_on_cuda(const Config& cfg);

}  // namespace u3d
