// Benchmarks run from the command line instead of training.
//
//   trainer --config exp.yaml --benchmark data [--workers 1,2,4]
//
// The data benchmark runs the batch pipeline alone (no model) on the config's training split,
// batch size, patch and augmentation, for each cache placement the machine offers (memory; pinned
// and gpu with CUDA) and each sampler thread count, and reports batches/s, samples/s and MB/s:
//   stage host    raw batches as the sampler threads leave them (compact dtypes, before
//                 normalisation and intensity augmentation): what a pinned staging ring copies to a GPU
//   stage device  batches ready for the network on the training device (float32, normalised,
//                 augmented; on CUDA after the copy and the batched finalizer, synchronised)
// It prints a table and one JSON line ({"benchmark": "data", ...}).
#pragma once
#include <string>
#include <vector>

#include "u3d/config.h"

namespace u3d {

struct DataBenchmarkOptions {
  std::vector<int64_t> workers;  // thread counts; empty: 1, 2, 4, ... and data.workers
  double seconds = 3.0;          // measured time per row, after a warm-up
};

struct DataBenchmarkRow {
  std::string placement;  // memory | pinned | gpu
  std::string stage;      // host | device
  int64_t workers = 0;    // sampler threads (0: sampling on the GPU)
  int64_t batches = 0;
  double seconds = 0;
  double batches_per_second = 0, samples_per_second = 0, megabytes_per_second = 0;
};

std::vector<DataBenchmarkRow> run_data_benchmark(const Config& cfg, const DataBenchmarkOptions& options);
// Runs the benchmark, prints the table and the JSON line to stdout; returns the exit code.
int data_benchmark_command(const Config& cfg, const DataBenchmarkOptions& options);
// "1,2,4" -> {1, 2, 4}; UsageError on anything else.
std::vector<int64_t> parse_worker_list(const std::string& text);

}  // namespace u3d
