// trainer --benchmark [step]: the training step alone (include/u3d/app/benchmark.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "u3d/app/benchmark.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/output_head.h"
#include "u3d/core/run.h"
#include "u3d/core/stats.h"
#include "u3d/core/version.h"
#include "u3d/data/preprocess.h"
#include "u3d/data/truth_maps.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/unet.h"
#include "u3d/train/distributed.h"
#include "u3d/train/grad_sync.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/resolve.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/train_step.h"

#if __has_include(<nvtx3/nvToolsExt.h>)  // header-only; nothing is loaded unless a profiler attaches
#include <nvtx3/nvToolsExt.h>
#define U3D_HAVE_NVTX 1
#endif

namespace u3d {
namespace {

// The NVTX start/end range "u3d.timed_steps" around the timed steps, so a profiler takes those alone
// (Nsight Compute: ncu --nvtx --nvtx-include u3d.timed_steps), not the warm-up's cuDNN autotuning
// trials. A start/end range, not push/pop: a push/pop range belongs to the thread that pushed it, and
// autograd launches the backward's kernels from its own device thread, so ncu's filter on a pushed
// range ("u3d.timed_steps/") took the forward and the optimizer only (seen on an H100, 2026-11-27).
class TimedStepsRange {
 public:
#ifdef U3D_HAVE_NVTX
  TimedStepsRange() : id_(nvtxRangeStartA("u3d.timed_steps")) {}
  ~TimedStepsRange() { nvtxRangeEnd(id_); }

 private:
  nvtxRangeId_t id_;
#endif
};

// The model and training keys as resolved (presets applied), as JSON members "key": "value", so
// scripts/bench/compare.py builds the same network in PyTorch.
Json resolved_keys(const Config& cfg) {
  static const char* const kKeys[] = {"model.architecture",
                                      "model.dims",
                                      "model.head",
                                      "model.levels",
                                      "model.base_filters",
                                      "model.max_filters",
                                      "model.convs_per_level",
                                      "model.blocks_per_level",
                                      "model.kernel_size",
                                      "model.kernel_sizes",
                                      "model.strides",
                                      "model.norm",
                                      "model.activation",
                                      "model.negative_slope",
                                      "model.dropout",
                                      "model.deep_supervision",
                                      "model.activation_checkpointing",
                                      "training.optimizer",
                                      "training.lr",
                                      "training.momentum",
                                      "training.nesterov",
                                      "training.weight_decay",
                                      "training.grad_clip_norm",
                                      "training.loss",
                                      "training.accumulate_steps"};
  Json members = Json::object();
  for (const char* key : kKeys) members[key] = get_value(cfg, key);
  return members;
}

void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace

StepBenchmarkResult run_step_benchmark(const Config& cfg, const StepBenchmarkOptions& options) {
  if (options.steps < 1) throw UsageError("--steps: at least 1 timed step");
  if (options.warmup < 0) throw UsageError("--warmup: 0 or more steps");
  const Runtime rt = init_runtime(cfg);
  StepBenchmarkResult r;
  r.device = rt.device.str();
  if (rt.device.is_cuda()) r.gpu_name = at::cuda::getDeviceProperties(rt.device.index())->name;

  // Channels and task from the dataset when it exists (its header only), else one-channel dose.
  Task task = Task::kDose;
  bool has_mask = true;
  LossOptions loss_opts;  // the dataset's ignore label and the config's class weights, when there is one
  TruthMapOptions maps;   // the ground-truth maps a training run's cache would hold (truth_maps.h)
  r.in_channels = std::max<int64_t>(1, static_cast<int64_t>(cfg.data.channels.size()));
  r.out_channels = 1;
  std::error_code ec;
  if (std::filesystem::exists(cfg.data.path, ec)) {
    const auto reader = open_dataset(cfg);
    const ResolvedConfig rc = resolve(cfg, *reader, rt.device);  // the run's checks and channels (resolve.h)
    task = rc.task();
    r.in_channels = rc.pre->in_channels();
    r.out_channels = network_channels(cfg.model.head, rc.pre->out_channels());
    loss_opts = loss_options(cfg.training, rc.info, cfg.model.head);
    maps = truth_map_options(cfg, rc.info);
  }
  const int64_t n = cfg.data.batch_size;
  const auto& p = cfg.data.patch_size;

  torch::manual_seed(static_cast<uint64_t>(cfg.experiment.seed));
  Network net = build_network(cfg.model, r.in_channels, r.out_channels);
  net->to(rt.device);
  r.forward_flops_per_sample = forward_flops(*net, p, r.in_channels);
  const int64_t micro = cfg.training.accumulate_steps;            // micro-batches per optimizer step
  r.flops_per_step = 3 * r.forward_flops_per_sample * n * micro;  // model FLOPs: recomputation not counted
  if (resolve_channels_last(cfg.model, rt.device)) to_channels_last(*net);
  net->train();
  r.parameters = count_parameters(*net);
  // Under torchrun or srun: the data-parallel step (trainer.h), rank 0's weights on every rank.
  std::unique_ptr<Distributed> dist;
  if (launch_env().launched) {
    dist = Distributed::join(launch_env(), cfg.training, rt.device);
    dist->broadcast_parameters(*net);
    loss_opts = data_parallel_loss_options(std::move(loss_opts), *dist);
  }
  const Loss loss(resolve_loss(cfg.training.loss, task, has_mask, cfg.model.head), loss_opts);
  Optimizer optimizer(cfg.training, net->parameters());
  optimizer.set_lr(cfg.training.lr);
  StepMonitor monitor(rt.device, static_cast<int64_t>(loss.term_names().size()));
  TrainStep step(cfg, rt.device, *net, loss, optimizer, &monitor);
  std::unique_ptr<GradientSync> grad_sync;
  if (dist) {
    grad_sync = std::make_unique<GradientSync>(optimizer.params(), *dist);
    step.set_data_parallel(grad_sync.get(), dist.get());
  }

  // Synthetic batch: (N, C, D, H, W) float32 image ~ N(0, 1); dose target in [0, 1) or labels; mask.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(rt.device);
  Batch batch;
  batch.image = torch::randn({n, r.in_channels, p[0], p[1], p[2]}, f32);
  if (task == Task::kSegmentation) {
    batch.target = torch::randint(0, r.out_channels + (cfg.model.head == Head::kSigmoid ? 1 : 0), {n, p[0], p[1], p[2]},
                                  f32.dtype(torch::kLong));
    batch.maps = truth_maps_of(batch.target, maps);  // made before timing, as the cache makes them at load
  } else {
    batch.target = torch::rand({n, 1, p[0], p[1], p[2]}, f32);
    batch.mask = (torch::rand({n, 1, p[0], p[1], p[2]}, f32) > 0.2).to(torch::kFloat);
  }

  r.warmup = options.warmup;
  if (step.features().cuda_graph) r.warmup = std::max(r.warmup, cfg.training.graph_warmup_steps + 1);
  const MicroBatches micro_batches = [&batch](int64_t) { return batch; };  // the same batch for each micro-step
  for (int64_t i = 0; i < r.warmup; ++i) step.run(micro_batches);
  sync(rt.device);
  r.warmup_skipped_steps = monitor.totals().skipped;  // fp16: the loss scale calibrates here
  if (rt.device.is_cuda()) {
    init_cuda_allocator();
    c10::cuda::CUDACachingAllocator::resetPeakStats(rt.device.index());
  }
  using Clock = std::chrono::steady_clock;
  {
    const TimedStepsRange range;
    for (int64_t i = 0; i < options.steps; ++i) {
      const auto t0 = Clock::now();
      step.run(micro_batches);
      sync(rt.device);
      r.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (i == 9) r.reserved_step10_bytes = gpu_memory_in_use(rt.device);
    }
  }
  r.reserved_last_bytes = gpu_memory_in_use(rt.device);
  if (r.reserved_step10_bytes < 0) r.reserved_last_bytes = -1;
  if (options.profile) {  // after the timed steps: every rank, so the collectives match
    r.profile = profile_steps([&] { step.run(micro_batches); }, options.profile_steps, rt.device);
  }
  r.skipped_steps = monitor.totals().skipped - r.warmup_skipped_steps;
  r.steps = options.steps;
  if (dist) {  // the same steps without the gradient all-reduce, then the all-reduce alone
    r.world_size = dist->world_size();
    r.backend = dist->backend_name();
    r.gradient_bytes = grad_sync->buffer_bytes();
    r.buckets = static_cast<int64_t>(grad_sync->buckets().size());
    // A replayed graph holds the all-reduces: steps without them are not separable (NaN, "null").
    std::vector<double> local_ms, reduce_ms;
    grad_sync->set_enabled(false);
    for (int64_t i = 0; i < options.steps && !step.replayed(); ++i) {
      dist->barrier();
      sync(rt.device);
      const auto t0 = Clock::now();
      step.run(micro_batches);
      sync(rt.device);
      local_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    grad_sync->set_enabled(true);
    for (int64_t i = 0; i < options.steps; ++i) {
      dist->barrier();
      reduce_ms.push_back(1e3 * grad_sync->reduce_seconds());
    }
    r.local_step_ms = local_ms.empty() ? std::nan("") : percentile(local_ms, 50.0);
    r.allreduce_ms = percentile(reduce_ms, 50.0);
  }
  const auto& f = step.features();
  r.features = f.describe();
  r.precision = precision_name(f.precision);
  r.channels_last = f.channels_last;
  r.cuda_graph = f.cuda_graph && step.replayed();
  r.cuda_graph_note = r.cuda_graph ? "" : (f.cuda_graph_note.empty() ? "not replayed" : f.cuda_graph_note);
  r.fused_optimizer = f.fused_optimizer;
  r.cudnn_benchmark = f.cudnn_benchmark;
  r.tf32 = f.tf32;
  r.median_ms = percentile(r.step_ms, 50.0);  // stats.h: numpy's linear convention
  r.p10_ms = percentile(r.step_ms, 10.0);
  r.p90_ms = percentile(r.step_ms, 90.0);
  // Over every rank: the global batch per step.
  r.samples_per_second = r.median_ms > 0 ? 1e3 * static_cast<double>(n * micro * r.world_size) / r.median_ms : 0;
  if (dist && std::isnan(r.local_step_ms)) {
    r.exposed_ms = r.hidden_share = r.scaling_efficiency = std::nan("");
  } else if (dist) {
    r.exposed_ms = std::max(0.0, r.median_ms - r.local_step_ms);
    r.hidden_share = r.allreduce_ms > 0 ? std::clamp(1.0 - r.exposed_ms / r.allreduce_ms, 0.0, 1.0) : 0.0;
    r.scaling_efficiency = r.median_ms > 0 ? r.local_step_ms / r.median_ms : 0.0;
  }
  r.tflops = r.median_ms > 0 ? static_cast<double>(r.flops_per_step) / (r.median_ms * 1e-3) / 1e12 : 0;
  if (rt.device.is_cuda()) {  // reserved: with a CUDA graph the activations live in its private pool
    const GpuMemoryPeaks peaks = gpu_memory_peaks(rt.device);
    r.peak_gpu_reserved_bytes = peaks.reserved;
    r.peak_gpu_allocated_bytes = peaks.allocated;
    r.peak_gpu_bytes = peaks.reserved;
  }
  r.peak_host_bytes = peak_memory_bytes(torch::kCPU);
  return r;
}

int step_benchmark_command(const Config& cfg, const StepBenchmarkOptions& options) {
  const StepBenchmarkResult r = run_step_benchmark(cfg, options);
  if (!launch_env().is_main()) return kExitOk;  // data-parallel: rank 0 reports
  const auto& p = cfg.data.patch_size;
  const int64_t n = cfg.data.batch_size;
  std::printf("training-step benchmark: %s%s, %s%s\n", to_string(cfg.model.architecture).c_str(),
              cfg.model.dims == 2 ? " (2D, model.dims 2)" : "", r.device.c_str(),
              r.gpu_name.empty() ? "" : (" (" + r.gpu_name + ")").c_str());
  std::printf("  model          %lld parameters, %lld -> %lld channels\n", static_cast<long long>(r.parameters),
              static_cast<long long>(r.in_channels), static_cast<long long>(r.out_channels));
  const int64_t micro = cfg.training.accumulate_steps;
  std::printf("  batch          %lld x [%lld, %lld, %lld], synthetic data%s\n", static_cast<long long>(n),
              static_cast<long long>(p[0]), static_cast<long long>(p[1]), static_cast<long long>(p[2]),
              micro > 1 ? fmt::format(", {} micro-batches per optimizer step", micro).c_str() : "");
  std::printf("  features       %s%s\n", r.features.c_str(),
              r.cuda_graph_note.empty() ? "" : (" (CUDA graph: " + r.cuda_graph_note + ")").c_str());
  std::printf("  steps          %lld timed after %lld warm-up\n", static_cast<long long>(r.steps),
              static_cast<long long>(r.warmup));
  std::printf("  step time      median %.3f ms, p10 %.3f ms, p90 %.3f ms\n", r.median_ms, r.p10_ms, r.p90_ms);
  std::printf("  throughput     %.2f %s/s\n", r.samples_per_second, cfg.model.dims == 2 ? "slices" : "samples");
  std::printf("  FLOPs/step     %.4g (forward %.4g per sample, x3 for training, x%lld samples%s)\n",
              static_cast<double>(r.flops_per_step), static_cast<double>(r.forward_flops_per_sample),
              static_cast<long long>(n * micro),
              cfg.model.activation_checkpointing == Checkpointing::kOff ? "" : "; the recomputation not counted");
  std::printf("  achieved       %.4f TFLOP/s\n", r.tflops);
  std::printf("  peak memory    %s\n",
              r.peak_gpu_bytes >= 0
                  ? (human_bytes(static_cast<double>(r.peak_gpu_reserved_bytes)) + " GPU reserved, " +
                     human_bytes(static_cast<double>(r.peak_gpu_allocated_bytes)) + " allocated")
                        .c_str()
                  : ("n/a (CPU; host peak RSS " + human_bytes(static_cast<double>(r.peak_host_bytes)) + ")").c_str());
  if (r.skipped_steps > 0 || r.warmup_skipped_steps > 0)
    std::printf("  skipped        %lld timed steps (non-finite loss or gradient), %lld warm-up steps\n",
                static_cast<long long>(r.skipped_steps), static_cast<long long>(r.warmup_skipped_steps));
  if (r.reserved_step10_bytes >= 0)
    std::printf("  memory held    %s after timed step 10, %s after the last\n",
                human_bytes(static_cast<double>(r.reserved_step10_bytes)).c_str(),
                human_bytes(static_cast<double>(r.reserved_last_bytes)).c_str());
  if (r.world_size > 1 || launch_env().launched) {
    std::printf("  data-parallel  %lld ranks over %s; %s of gradients in %lld buckets\n",
                static_cast<long long>(r.world_size), r.backend.c_str(),
                human_bytes(static_cast<double>(r.gradient_bytes)).c_str(), static_cast<long long>(r.buckets));
    if (std::isnan(r.local_step_ms)) {
      std::printf(
          "  all-reduce     %.3f ms alone; step %.3f ms with it (captured in the CUDA graph: the step without it, "
          "the exposed part and the scaling efficiency come from a run with training.cuda_graph=off)\n",
          r.allreduce_ms, r.median_ms);
    } else {
      std::printf(
          "  all-reduce     %.3f ms alone; step %.3f ms with it, %.3f ms without: %.3f ms exposed, %.0f%% hidden "
          "under backward\n",
          r.allreduce_ms, r.median_ms, r.local_step_ms, r.exposed_ms, 100.0 * r.hidden_share);
      std::printf(
          "  scaling        %.1f%% efficiency (step without / with the all-reduce); %.2f samples/s over all ranks\n",
          100.0 * r.scaling_efficiency, r.samples_per_second);
    }
  }
  auto text_or_null = [](const std::string& v) { return v.empty() ? Json(nullptr) : Json(v); };
  const Json json = {{"benchmark", "step"},
                     {"tool", "trainer"},
                     {"version", std::string(version())},
                     {"commit", std::string(git_commit())},
                     {"torch", TORCH_VERSION},
                     {"device", r.device},
                     {"gpu", text_or_null(r.gpu_name)},
                     {"architecture", to_string(cfg.model.architecture)},
                     {"parameters", r.parameters},
                     {"in_channels", r.in_channels},
                     {"out_channels", r.out_channels},
                     {"batch", n},
                     {"accumulate_steps", micro},
                     {"activation_checkpointing", to_string(cfg.model.activation_checkpointing)},
                     {"patch", {p[0], p[1], p[2]}},
                     {"data", "synthetic"},
                     {"steps", r.steps},
                     {"warmup", r.warmup},
                     {"precision", r.precision},
                     {"channels_last", r.channels_last},
                     {"cuda_graph", r.cuda_graph},
                     {"cuda_graph_note", r.cuda_graph_note},
                     {"fused_optimizer", r.fused_optimizer},
                     {"cudnn_benchmark", r.cudnn_benchmark},
                     {"tf32", r.tf32},
                     {"deterministic", cfg.training.deterministic},
                     {"step_ms_median", json_number(r.median_ms, 4)},
                     {"step_ms_p10", json_number(r.p10_ms, 4)},
                     {"step_ms_p90", json_number(r.p90_ms, 4)},
                     {"samples_per_s", json_number(r.samples_per_second, 4)},
                     {"peak_gpu_mem_bytes", json_count(r.peak_gpu_bytes)},
                     {"peak_gpu_reserved_bytes", json_count(r.peak_gpu_reserved_bytes)},
                     {"peak_gpu_allocated_bytes", json_count(r.peak_gpu_allocated_bytes)},
                     {"peak_host_rss_bytes", r.peak_host_bytes},
                     {"forward_flops_per_sample", r.forward_flops_per_sample},
                     {"flops_per_step", r.flops_per_step},
                     {"tflops", json_number(r.tflops, 6)},
                     {"data_wait_share", 0},
                     {"skipped_steps", r.skipped_steps},
                     {"warmup_skipped_steps", r.warmup_skipped_steps},
                     {"reserved_step10_bytes", json_count(r.reserved_step10_bytes)},
                     {"reserved_last_bytes", json_count(r.reserved_last_bytes)},
                     {"world_size", r.world_size},
                     {"dist_backend", text_or_null(r.backend)},
                     {"gradient_bytes", r.gradient_bytes},
                     {"buckets", r.buckets},
                     {"allreduce_ms", json_number(r.allreduce_ms, 4)},
                     {"local_step_ms", json_number(r.local_step_ms, 4)},
                     {"exposed_ms", json_number(r.exposed_ms, 4)},
                     {"hidden_share", json_number(r.hidden_share, 4)},
                     {"scaling_efficiency", json_number(r.scaling_efficiency, 4)},
                     {"resolved", resolved_keys(cfg)}};
  std::fputs((json_line(json) + "\n").c_str(), stdout);
  if (r.profile) {
    print_step_profile(*r.profile);
    std::fputs((json_line(step_profile_json(*r.profile)) + "\n").c_str(), stdout);
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace u3d
