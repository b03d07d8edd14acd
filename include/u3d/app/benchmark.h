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
//
//   trainer --config exp.yaml --benchmark [step] [--steps N] [--warmup W]
//
// The step benchmark times the training step alone (TrainStep: the config's model, loss, optimizer,
// precision, channels-last and CUDA-graph settings) on synthetic batches of the config's batch size,
// patch and channels (the dataset's channel count and task when data.path exists; its data is not
// read, so the data-wait share is 0): W warm-up steps (at least training.graph_warmup_steps + 1 with
// a CUDA graph, so every timed step is a replay), then N steps each timed to the device's end
// (torch::cuda::synchronize). It prints a table and one JSON line ({"benchmark": "step", ...}):
// step time median/p10/p90, samples/s, peak GPU memory (null on CPU), the memory held after the 10th
// and the last timed step, skipped steps (timed and warm-up apart), FLOPs per step from the
// network definition (3 x forward_flops() x batch), achieved TFLOP/s, data-wait share, the features
// on, device, version and commit.
//
//   trainer --config exp.yaml --benchmark [step] --profile
//
// --profile then runs 3 more steps under LibTorch's profiler and prints the step's time by category
// (convolution, normalisation, activation, elementwise, copy/cast, reduction, loss, optimizer, other: ms
// per step and share) and the top 10 ops, and a second JSON line ({"benchmark": "step_profile",
// ...}, step_profile.h). The benchmark writes no files: both JSON lines go to stdout.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "u3d/app/step_profile.h"
#include "u3d/core/config.h"

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

struct StepBenchmarkOptions {
  int64_t steps = 20;    // timed steps
  int64_t warmup = 5;    // untimed steps first
  bool profile = false;  // --profile: then profile_steps more steps under LibTorch's profiler
  int64_t profile_steps = 3;
};

struct StepBenchmarkResult {
  std::string device, gpu_name;  // gpu_name empty on CPU
  int64_t parameters = 0, in_channels = 0, out_channels = 0;
  int64_t steps = 0, warmup = 0;
  std::string features;   // StepFeatures::describe()
  std::string precision;  // fp32 | bf16 | fp16
  bool channels_last = false, cuda_graph = false, fused_optimizer = true, cudnn_benchmark = false, tf32 = false;
  std::string cuda_graph_note;
  std::vector<double> step_ms;  // each timed step, in order
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  double samples_per_second = 0;
  int64_t forward_flops_per_sample = 0;
  int64_t flops_per_step = 0;             // 3 x forward x batch
  double tflops = 0;                      // flops_per_step / median
  int64_t peak_gpu_bytes = -1;            // peak reserved (= peak_gpu_reserved_bytes); -1 on CPU
  int64_t peak_gpu_reserved_bytes = -1;   // caching allocator's peak reserved, the graph's pool included
  int64_t peak_gpu_allocated_bytes = -1;  // peak bytes in tensors
  int64_t peak_host_bytes = 0;            // peak resident set of the process
  int64_t skipped_steps = 0;              // timed steps skipped (non-finite loss or gradient)
  int64_t warmup_skipped_steps = 0;       // warm-up steps skipped (fp16's loss-scale calibration: expected)
  // GPU memory the caching allocator holds (reserved) after the 10th timed step and after the last,
  // in this one process (the same autotuned algorithms): growth between them is a leak. -1 on CPU
  // or with fewer than 10 timed steps.
  int64_t reserved_step10_bytes = -1, reserved_last_bytes = -1;
  // Under torchrun or srun (data-parallel; world_size 1 otherwise): the timed steps above include
  // the bucketed gradient all-reduce; the same steps without it (local_step_ms), the all-reduce of
  // every bucket alone (allreduce_ms), what of it the step waits for (exposed = step - local), the
  // share hidden under backward (1 - exposed / all-reduce), and the scaling efficiency
  // local / step (per-GPU throughput kept with communication; 1 = perfect). Medians, rank 0's.
  // With a replayed CUDA graph (training.cuda_graph: on) the all-reduces are in the graph: local,
  // exposed, hidden and efficiency are NaN (JSON null); a cuda_graph=off run gives them.
  int64_t world_size = 1;
  std::string backend;  // nccl | gloo
  int64_t gradient_bytes = 0, buckets = 0;
  double allreduce_ms = 0, local_step_ms = 0, exposed_ms = 0, hidden_share = 0, scaling_efficiency = 0;
  // --profile: the time of profile_steps more steps by category (step_profile.h); nullopt without.
  std::optional<StepProfile> profile;
};

StepBenchmarkResult run_step_benchmark(const Config& cfg, const StepBenchmarkOptions& options);
// Runs it, prints the table and the JSON line to stdout; returns the exit code.
int step_benchmark_command(const Config& cfg, const StepBenchmarkOptions& options);

}  // namespace u3d
