// The training step on CUDA: graph replay against eager steps, fp16 loss scaling with an injected
// Inf, capture without host synchronisation, and the step benchmark's GPU figures. Every test
// skips itself where no CUDA device is present.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <regex>

#include "batches.h"
#include "devices.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/run.h"
#include "u3d/train/cuda_graph.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

using test::kCuda;

Config cuda_cfg(Precision precision, Toggle graph, bool deterministic) {
  Config cfg;
  cfg.data.path = "unused.h5";
  cfg.model.levels = 3;
  cfg.model.base_filters = 8;
  cfg.model.channels_last = Toggle::kOn;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = precision;
  cfg.training.cuda_graph = graph;
  cfg.training.graph_warmup_steps = 2;
  cfg.training.deterministic = deterministic;
  cfg.training.lr = 1e-3;
  cfg.training.grad_clip_norm = 1.0;
  return cfg;
}

// Batch i of 2 samples of size^3 voxels.
Batch cuda_batch(int64_t i, int64_t size = 32) {
  return test::random_batch(1000 + static_cast<uint64_t>(i), 2, size).to(kCuda);
}

// One batch as the micro-batches of a step of one.
MicroBatches one(const Batch& b) {
  return [b](int64_t) { return b; };
}

struct CudaRun {
  std::vector<float> losses, skipped;
  std::vector<double> scales;
  bool replayed = false;
  int64_t applied = 0;
  int64_t peak_allocated = 0;  // bytes, over the steps after the first (train_cuda resets the peak then)
};

CudaRun train_cuda(const Config& cfg, int64_t steps, int64_t inf_at = -1, int64_t size = 32) {
  auto& ctx = at::globalContext();
  ctx.setDeterministicCuDNN(cfg.training.deterministic);
  ctx.setBenchmarkCuDNN(!cfg.training.deterministic);
  ctx.setAllowTF32CuDNN(!cfg.training.deterministic);
  ctx.setAllowTF32CuBLAS(!cfg.training.deterministic);
  init_cuda_allocator();  // the allocator's statistics refuse the device before its first allocation
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(kCuda.index());
  torch::manual_seed(5);
  Network net = build_network(cfg.model, 2, 1);
  net->to(kCuda);
  if (resolve_channels_last(cfg.model, kCuda)) to_channels_last(*net);
  const Loss loss(LossKind::kMaskedL1);
  Optimizer opt(cfg.training, net->parameters());
  StepMonitor monitor(kCuda);
  TrainStep step(cfg, kCuda, *net, loss, opt, &monitor);
  int64_t i = 0;
  if (inf_at >= 0) {
    step.set_after_backward([&](const std::vector<torch::Tensor>& params) {
      if (i != inf_at) return;
      plant_value(params[0].mutable_grad(), std::numeric_limits<float>::infinity());  // channels-last gradient
    });
  }
  CudaRun run;
  for (i = 0; i < steps; ++i) {
    opt.set_lr(cfg.training.lr * (1.0 - 0.05 * static_cast<double>(i)));  // the LR changes outside the graph
    const int64_t micro = cfg.training.accumulate_steps;                  // micro-batches i * micro + m
    const torch::Tensor l = micro == 1 ? step.run(cuda_batch(i, size))
                                       : step.run([&](int64_t m) { return cuda_batch(i * micro + m, size); });
    run.losses.push_back(l.item<float>());
    if (i == 0) {  // the first step's allocations (cuDNN's algorithm search, lazy state) are not the step's
      torch::cuda::synchronize();
      c10::cuda::CUDACachingAllocator::resetPeakStats(kCuda.index());
    }
    run.skipped.push_back(step.found_inf().item<float>());
    if (step.scaler()) run.scales.push_back(step.scaler()->scale_value());
  }
  run.replayed = step.replayed();
  run.applied = opt.steps_applied();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(kCuda.index());
  run.peak_allocated = stats.allocated_bytes[0].peak;  // [0]: all pools
  return run;
}

TEST(GpuTrainStep, GraphReplayGivesTheEagerLossesBitwiseInDeterministicFp32) {
  U3D_REQUIRE_CUDA();
  const CudaRun eager = train_cuda(cuda_cfg(Precision::kFp32, Toggle::kOff, true), 8);
  const CudaRun graph = train_cuda(cuda_cfg(Precision::kFp32, Toggle::kOn, true), 8);
  EXPECT_FALSE(eager.replayed);
  EXPECT_TRUE(graph.replayed);
  EXPECT_EQ(graph.losses, eager.losses);
}

// Without clipping the step sets the gradients to none and takes its Inf/NaN flag from the loss (no
// gradient norm): the captured backward allocates the gradients from the graph's pool, and each
// replay rewrites them in place, so replays still give the eager losses bit for bit.
TEST(GpuTrainStep, GradientsSetToNoneWithoutClippingReplayLikeEagerBitwise) {
  U3D_REQUIRE_CUDA();
  Config eager_cfg = cuda_cfg(Precision::kFp32, Toggle::kOff, true);
  Config graph_cfg = cuda_cfg(Precision::kFp32, Toggle::kOn, true);
  eager_cfg.training.grad_clip_norm = graph_cfg.training.grad_clip_norm = 0.0;
  const CudaRun eager = train_cuda(eager_cfg, 8);
  const CudaRun graph = train_cuda(graph_cfg, 8);
  EXPECT_TRUE(graph.replayed);
  EXPECT_EQ(graph.losses, eager.losses);
  EXPECT_EQ(graph.applied, 8);
  graph_cfg.training.accumulate_steps = eager_cfg.training.accumulate_steps = 2;  // later micro-batches add
  EXPECT_EQ(train_cuda(graph_cfg, 5).losses, train_cuda(eager_cfg, 5).losses);
}

TEST(GpuTrainStep, GraphReplayFollowsEagerInBf16) {
  U3D_REQUIRE_CUDA();
  const CudaRun eager = train_cuda(cuda_cfg(Precision::kBf16, Toggle::kOff, false), 8);
  const CudaRun graph = train_cuda(cuda_cfg(Precision::kBf16, Toggle::kOn, false), 8);
  EXPECT_TRUE(graph.replayed);
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    EXPECT_NEAR(graph.losses[i], eager.losses[i], 0.02 * std::abs(eager.losses[i]) + 1e-3) << "step " << i;
  }
}

TEST(GpuTrainStep, Bf16FollowsFp32) {
  U3D_REQUIRE_CUDA();
  const CudaRun fp32 = train_cuda(cuda_cfg(Precision::kFp32, Toggle::kOff, true), 5);
  const CudaRun bf16 = train_cuda(cuda_cfg(Precision::kBf16, Toggle::kOff, true), 5);
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 0.03 * std::abs(fp32.losses[i]) + 1e-3) << "step " << i;
  }
}

TEST(GpuTrainStep, Fp16InjectedInfSkipsExactlyThatStepAndBacksOffTheScale) {
  U3D_REQUIRE_CUDA();
  const CudaRun run = train_cuda(cuda_cfg(Precision::kFp16, Toggle::kOff, false), 6, /*inf_at=*/3);
  EXPECT_EQ(run.skipped, (std::vector<float>{0, 0, 0, 1, 0, 0}));
  ASSERT_EQ(run.scales.size(), 6u);
  EXPECT_DOUBLE_EQ(run.scales[2], 65536.0);
  EXPECT_DOUBLE_EQ(run.scales[3], 32768.0);  // backed off at the skipped step
  EXPECT_DOUBLE_EQ(run.scales[5], 32768.0);  // no growth before 2000 clean steps
  EXPECT_EQ(run.applied, 5);
}

TEST(GpuTrainStep, Fp16StepCapturesAndReplays) {
  U3D_REQUIRE_CUDA();
  const CudaRun run = train_cuda(cuda_cfg(Precision::kFp16, Toggle::kOn, false), 6);
  EXPECT_TRUE(run.replayed);
  for (const float s : run.skipped) EXPECT_EQ(s, 0.0f);
  EXPECT_EQ(run.applied, 6);
}

// A host read inside the step makes the capture fail: with `on` and with `auto` that is a one-line
// TrainingError naming the failure and training.cuda_graph: off (never a silent fallback). The
// capture is ended and its private pool released, so the caching allocator holds no more than
// before the capture once its cache is emptied, and the device keeps working, random draws included
// (the step draws dropout masks in the capture).
TEST(GpuTrainStep, AHostSyncInsideTheStepFailsTheCaptureWithAOneLineError) {
  U3D_REQUIRE_CUDA();
  auto syncing = [](const MicroBatches& micro, bool) {
    const Batch b = micro(0);
    const torch::Tensor noisy = torch::dropout(b.image, /*p=*/0.5, /*train=*/true);  // draws in the capture
    const float v = noisy.sum().item<float>();                                       // host synchronisation
    return StepOutputs{torch::full({}, v, b.image.options()), torch::zeros({}, b.image.options())};
  };
  for (const bool required : {true, false}) {
    CudaGraphStep graph(syncing, /*warmup_steps=*/1, /*micro_steps=*/1, required);
    EXPECT_TRUE(graph.run(one(cuda_batch(0))).has_value());  // warm-up, eager
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const int64_t reserved_before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[all].current;
    try {
      graph.run(one(cuda_batch(1)));
      ADD_FAILURE() << "the capture of a host read succeeded";
    } catch (const TrainingError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(what.find("could not be captured"), std::string::npos) << what;
      EXPECT_NE(what.find("training.cuda_graph: off"), std::string::npos) << what;
    }
    EXPECT_FALSE(graph.captured());
    // The allocator left capture mode and released the graph's pool: nothing more is held than before.
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    EXPECT_LE(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[all].current, reserved_before);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream().stream(), &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    EXPECT_EQ(torch::ones({4}, torch::TensorOptions().device(kCuda)).sum().item<float>(), 4.0f);
    // The default generator is out of capture mode: seeded eager draws repeat, and dropout works.
    const auto on_cuda = torch::TensorOptions().device(kCuda);
    torch::manual_seed(11);
    const torch::Tensor r1 = torch::rand({4096}, on_cuda);
    torch::manual_seed(11);
    const torch::Tensor r2 = torch::rand({4096}, on_cuda);
    EXPECT_TRUE(torch::equal(r1, r2));
    EXPECT_FALSE(torch::equal(r1, torch::rand({4096}, on_cuda)));
    const torch::Tensor kept = torch::dropout(torch::ones({4096}, on_cuda), /*p=*/0.5, /*train=*/true).ne(0);
    const int64_t n_kept = kept.sum().item<int64_t>();
    EXPECT_GT(n_kept, 1500);
    EXPECT_LT(n_kept, 2600);
    // A new allocation after the failure comes from the ordinary pool and can be freed again.
    { const torch::Tensor big = torch::empty({64 << 20}, torch::TensorOptions().device(kCuda)); }
    torch::cuda::synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    EXPECT_LE(c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[all].current, reserved_before);
  }
}

TEST(GpuTrainStep, AChangedBatchShapeFallsBackToEager) {
  U3D_REQUIRE_CUDA();
  auto step = [](const MicroBatches& micro, bool) {
    const Batch b = micro(0);
    return StepOutputs{b.image.mean(), torch::zeros({}, b.image.options())};
  };
  CudaGraphStep graph(step, /*warmup_steps=*/1, /*micro_steps=*/1, /*required=*/false);
  EXPECT_TRUE(graph.run(one(cuda_batch(0))).has_value());
  EXPECT_TRUE(graph.run(one(cuda_batch(1))).has_value());
  EXPECT_TRUE(graph.captured());
  Batch small = cuda_batch(2);
  small.image = small.image.narrow(0, 0, 1).contiguous();
  EXPECT_FALSE(graph.run(one(small)).has_value());
  EXPECT_NE(graph.fallback_reason().find("batch shape changed"), std::string::npos);
}

TEST(GpuTrainStep, StepBenchmarkOnCudaReportsPeakMemoryAndReplays) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 4, 32);
  test::write_text(dir / "b.yaml", test::tiny_config("p.h5", "b"));
  const auto r =
      test::run_trainer({"--config", "b.yaml", "--benchmark", "--steps", "20", "--set", "training.device=cuda", "--set",
                         "training.deterministic=false", "--set", "data.patch_size=32"},
                        dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Memory held after timed step 10 and after step 20 of one process: a replayed graph holds steady.
  std::smatch m10, m20;
  ASSERT_TRUE(std::regex_search(r.output, m10, std::regex("\"reserved_step10_bytes\": ([0-9]+)"))) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, m20, std::regex("\"reserved_last_bytes\": ([0-9]+)"))) << r.output;
  EXPECT_GT(std::stoll(m10[1]), 0);
  EXPECT_EQ(std::stoll(m20[1]), std::stoll(m10[1]));
  EXPECT_NE(r.output.find("\"skipped_steps\": 0,"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\"peak_gpu_mem_bytes\": null"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"peak_gpu_mem_bytes\": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"precision\": \"bf16\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"cuda_graph\": true"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"channels_last\": true"), std::string::npos) << r.output;  // auto: on with every norm
  EXPECT_EQ(r.output.find("\"peak_gpu_reserved_bytes\": null"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\"peak_gpu_allocated_bytes\": null"), std::string::npos) << r.output;
  // With batch norm, auto is channels-last.
  const auto bn =
      test::run_trainer({"--config", "b.yaml", "--benchmark", "--steps", "4", "--set", "training.device=cuda", "--set",
                         "model.norm=batch", "--set", "data.patch_size=32"},
                        dir.path());
  ASSERT_EQ(bn.exit_code, 0) << bn.output;
  EXPECT_NE(bn.output.find("\"channels_last\": true"), std::string::npos) << bn.output;
  EXPECT_NE(bn.output.find("\"cuda_graph\": true"), std::string::npos) << bn.output;
  // With batch norm, precision auto is fp16 with loss scaling (cuDNN has no bf16 batch norm), logged.
  EXPECT_NE(bn.output.find("\"precision\": \"fp16\""), std::string::npos) << bn.output;
  EXPECT_NE(bn.output.find("precision auto: fp16 with loss scaling (batch norm"), std::string::npos) << bn.output;
  // --profile on CUDA: the device's kernel time by category, the shares adding up to 1.
  const auto prof = test::run_trainer({"--config", "b.yaml", "--benchmark", "--steps", "2", "--set",
                                       "training.device=cuda", "--set", "data.patch_size=32", "--profile"},
                                      dir.path());
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  EXPECT_NE(prof.output.find("\"source\": \"cuda device time\""), std::string::npos) << prof.output;
  double sum = 0;
  const std::regex re("\"share\": ([0-9.]+)");
  for (auto it = std::sregex_iterator(prof.output.begin(), prof.output.end(), re); it != std::sregex_iterator(); ++it) {
    sum += std::stod((*it)[1]);
  }
  EXPECT_NEAR(sum, 1.0, 2e-3) << prof.output;
}

// Issue 19's levers on the GPU: activation checkpointing and gradient accumulation inside a
// captured graph give the eager steps' losses bitwise (deterministic fp32), checkpointing lowers the
// peak memory, and the residual-encoder U-Net captures in bf16.
TEST(GpuTrainStep, CheckpointedAndAccumulatedStepsReplayLikeEagerStepsBitwise) {
  U3D_REQUIRE_CUDA();
  Config eager = cuda_cfg(Precision::kFp32, Toggle::kOff, true);
  Config graph = cuda_cfg(Precision::kFp32, Toggle::kOn, true);
  graph.model.activation_checkpointing = Checkpointing::kAll;
  const CudaRun plain = train_cuda(eager, 6);
  const CudaRun ckpt = train_cuda(graph, 6);
  EXPECT_TRUE(ckpt.replayed);
  EXPECT_EQ(ckpt.losses, plain.losses);
  eager.training.accumulate_steps = 3;
  graph.training.accumulate_steps = 3;
  graph.model.activation_checkpointing = Checkpointing::kOff;
  const CudaRun eager_acc = train_cuda(eager, 6);
  const CudaRun graph_acc = train_cuda(graph, 6);
  EXPECT_TRUE(graph_acc.replayed);
  EXPECT_EQ(graph_acc.losses, eager_acc.losses);
  EXPECT_EQ(graph_acc.applied, 6);            // optimizer steps, not micro-batches
  EXPECT_NE(eager_acc.losses, plain.losses);  // other batches: the comparison is not vacuous
}

// The activations' share of the peak: cuDNN autotuning off (deterministic cuDNN settings), so both
// runs use the same heuristic algorithms and workspaces, and the peak is taken over the steps after
// the first (train_cuda), so neither run's algorithm search or lazy state counts. What the patch
// size adds to the peak is the activations' part (weights, gradients, optimizer moments and the
// context do not grow with it): checkpointing must cut that growth, whatever the fixed part is.
TEST(GpuTrainStep, ActivationCheckpointingLowersThePeakMemory) {
  U3D_REQUIRE_CUDA();
  Config cfg = cuda_cfg(Precision::kBf16, Toggle::kOff, /*deterministic=*/true);
  cfg.model.levels = 4;
  cfg.model.base_filters = 16;
  const CudaRun plain = train_cuda(cfg, 3);
  const CudaRun plain_large = train_cuda(cfg, 3, /*inf_at=*/-1, /*size=*/64);
  cfg.model.activation_checkpointing = Checkpointing::kAll;
  const CudaRun ckpt = train_cuda(cfg, 3);
  const CudaRun ckpt_large = train_cuda(cfg, 3, /*inf_at=*/-1, /*size=*/64);
  const double plain_growth = static_cast<double>(plain_large.peak_allocated - plain.peak_allocated);
  const double ckpt_growth = static_cast<double>(ckpt_large.peak_allocated - ckpt.peak_allocated);
  std::printf("peak allocated at 32^3 / 64^3: plain %.1f / %.1f MiB, checkpointed %.1f / %.1f MiB\n",
              plain.peak_allocated / 1048576.0, plain_large.peak_allocated / 1048576.0, ckpt.peak_allocated / 1048576.0,
              ckpt_large.peak_allocated / 1048576.0);
  EXPECT_GT(plain_growth, 0.0);
  EXPECT_LT(ckpt_growth, plain_growth * 0.8);
  EXPECT_LT(ckpt_large.peak_allocated, plain_large.peak_allocated);
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_NEAR(ckpt.losses[i], plain.losses[i], 1e-2) << i;
  for (size_t i = 0; i < plain_large.losses.size(); ++i) {
    EXPECT_NEAR(ckpt_large.losses[i], plain_large.losses[i], 1e-2) << i;
  }
}

TEST(GpuTrainStep, ResidualEncoderUNetCapturesInBf16) {
  U3D_REQUIRE_CUDA();
  Config cfg = cuda_cfg(Precision::kBf16, Toggle::kOn, false);
  cfg.model.architecture = Architecture::kResEncUNet;
  cfg.model.convs_per_level = 1;
  cfg.model.activation_checkpointing = Checkpointing::kEncoder;
  cfg.training.accumulate_steps = 2;
  const CudaRun run = train_cuda(cfg, 6);
  EXPECT_TRUE(run.replayed);
  EXPECT_EQ(run.skipped, std::vector<float>(6, 0.0f));
  for (const float l : run.losses) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace u3d
