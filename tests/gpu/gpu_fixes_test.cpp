// GPU tests for the first-GPU-run fixes: captures of the segmentation and OpenKBP-baseline steps,
// the GPU sampler inside the graph, capture while the sampler threads work, deterministic runs of
// both tasks, resume bit for bit with a graph and a GPU cache, channels-last through every fused
// optimizer. Each CLI test that expects a captured step checks the log for the capture, so none
// passes by falling back to eager steps. Every test skips itself where no CUDA device is present.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "batches.h"
#include "devices.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/plan/memory_model.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/step_probe.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

using test::kCuda;
constexpr const char* kCaptured = "captured in a CUDA graph";
constexpr const char* kSamplerCaptured = "GPU sampler is captured";

struct StepRun {
  std::vector<float> losses;
  bool replayed = false;
};

// `steps` steps of `net` on fixed random batches; graph on or off.
StepRun run_steps(Config cfg, Network net, const Loss& loss, const std::function<Batch(int64_t)>& batch, Toggle graph,
                  int64_t steps) {
  cfg.training.cuda_graph = graph;
  cfg.training.graph_warmup_steps = 2;
  net->to(kCuda);
  if (resolve_channels_last(cfg.model, kCuda)) to_channels_last(*net);
  Optimizer opt(cfg.training, net->parameters());
  opt.set_lr(cfg.training.lr);
  StepMonitor monitor(kCuda);
  TrainStep step(cfg, kCuda, *net, loss, opt, &monitor);
  StepRun r;
  for (int64_t i = 0; i < steps; ++i) r.losses.push_back(step.run(batch(i)).item<float>());
  r.replayed = step.replayed();
  EXPECT_EQ(monitor.totals().skipped, 0);
  return r;
}

// A 4-level segmentation net with deep supervision, fp32 on CUDA, and its batches: (2, 1, 32^3)
// images and 3-class labels, seeded by `seed` + step.
Config segmentation_cfg(Architecture architecture) {
  Config cfg;
  cfg.model.architecture = architecture;
  cfg.model.levels = 4;
  cfg.model.base_filters = 4;
  cfg.model.deep_supervision = true;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = Precision::kFp32;
  cfg.training.lr = 1e-3;
  return cfg;
}
std::function<Batch(int64_t)> segmentation_batches(uint64_t seed) {
  return [seed](int64_t i) {
    torch::manual_seed(seed + static_cast<uint64_t>(i));
    Batch b;
    b.image = torch::randn({2, 1, 32, 32, 32}).to(kCuda);
    b.target = torch::randint(0, 3, {2, 32, 32, 32}, torch::kLong).to(kCuda);
    return b;
  };
}

class GpuFixes : public test::CudaTest {
 protected:
  // The trainer on the GPU under `config` (graphs after two warm-up steps), with `extra`.
  test::CommandResult cuda_train(const std::string& config, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "--config", config, "--set", "training.device=cuda", "--set", "training.graph_warmup_steps=2"};
    for (auto& e : extra) args.push_back(std::move(e));
    return trainer(args);
  }
};

TEST_F(GpuFixes, SegmentationStepWithDeepSupervisionCapturesAndEqualsEager) {
  // The trainer's deterministic path (deterministic algorithms too): CUDA's nll_loss2d forward sums
  // with atomics, so cross-entropy is bitwise repeatable only through cross_entropy_loss_deterministic.
  const test::Deterministic deterministic;
  const Config cfg = segmentation_cfg(Architecture::kUNet);
  const auto batch = segmentation_batches(50);
  const Loss loss(LossKind::kDiceCe);
  torch::manual_seed(4);
  const StepRun eager = run_steps(cfg, build_network(cfg.model, 1, 3), loss, batch, Toggle::kOff, 6);
  torch::manual_seed(4);
  const StepRun graph = run_steps(cfg, build_network(cfg.model, 1, 3), loss, batch, Toggle::kOn, 6);
  EXPECT_TRUE(graph.replayed);
  EXPECT_EQ(graph.losses, eager.losses);
}

// training.deterministic with a residual-encoder net: the skip path's pooling (mean_pool3d) has a
// deterministic backward on CUDA (avg_pool3d's throws there), so the step runs and repeats exactly,
// eager and captured.
TEST_F(GpuFixes, ResidualEncoderStepsRepeatExactlyUnderDeterministicAlgorithms) {
  const test::Deterministic deterministic;
  const Config cfg = segmentation_cfg(Architecture::kResEncUNet);
  const auto batch = segmentation_batches(90);
  const Loss loss(LossKind::kDiceCe);
  std::vector<StepRun> runs;
  for (const Toggle graph : {Toggle::kOff, Toggle::kOff, Toggle::kOn}) {
    torch::manual_seed(6);
    runs.push_back(run_steps(cfg, build_network(cfg.model, 1, 3), loss, batch, graph, 5));
  }
  EXPECT_EQ(runs[0].losses, runs[1].losses);
  EXPECT_TRUE(runs[2].replayed);
  EXPECT_EQ(runs[2].losses, runs[0].losses);
}

TEST_F(GpuFixes, OpenKbpBaselineStepWithBatchNormAndDropoutCaptures) {
  Config cfg;
  cfg.model.architecture = Architecture::kOpenKbpBaseline;
  cfg.model.base_filters = 4;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = Precision::kBf16;
  cfg.training.lr = 1e-3;
  auto batch = [](int64_t i) { return test::random_batch(70 + static_cast<uint64_t>(i), 3, 64).to(kCuda); };
  const Loss loss(LossKind::kMaskedL1);
  torch::manual_seed(4);
  const StepRun graph = run_steps(cfg, build_network(cfg.model, 3, 1), loss, batch, Toggle::kOn, 8);
  EXPECT_TRUE(graph.replayed);
  for (const float l : graph.losses) EXPECT_TRUE(std::isfinite(l));
  // Dropout draws new masks every replay (graph-safe RNG): equal losses on equal batches would mean
  // frozen masks.
  EXPECT_NE(graph.losses[6], graph.losses[7]);
}

// Channels-last parameters keep their layout through real training steps of every fused optimizer,
// and the optimizer's update does not depend on the layout: the same values and gradients in
// ChannelsLast3d and in contiguous order give the same parameters. (Comparing two networks instead
// would compare different gradients: cuDNN picks other algorithms per layout, and Adam turns the
// rounding noise of a bias ahead of batch norm, whose true gradient is 0, into a full step.)
TEST_F(GpuFixes, ChannelsLastParametersGoThroughEveryFusedOptimizer) {
  const test::NoTf32 no_tf32;
  for (const OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    Config cfg = test::cuda_batch_norm_config(3, 4, Precision::kFp32);
    cfg.training.optimizer = kind;
    cfg.training.grad_clip_norm = 1.0;
    torch::manual_seed(6);
    Network net = build_network(cfg.model, 2, 1);
    auto batch = [](int64_t i) {
      torch::manual_seed(80 + static_cast<uint64_t>(i));
      Batch b;
      b.image = torch::randn({2, 2, 16, 16, 16}).to(kCuda);
      b.target = torch::rand({2, 1, 16, 16, 16}).to(kCuda);
      return b;
    };
    const StepRun run = run_steps(cfg, net, Loss(LossKind::kL1), batch, Toggle::kOff, 3);
    for (const float l : run.losses) EXPECT_TRUE(std::isfinite(l)) << to_string(kind);
    int64_t five_d = 0;
    for (const auto& p : net->parameters()) {
      if (p.dim() != 5) continue;
      ++five_d;
      EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast3d)) << to_string(kind);
      EXPECT_TRUE(p.isfinite().all().item<bool>()) << to_string(kind);
    }
    EXPECT_GT(five_d, 0);

    // The same update in both layouts: weights (8, 4, 3, 3, 3) and their gradients, three steps.
    std::vector<std::vector<torch::Tensor>> results;
    for (const bool cl : {false, true}) {
      const auto layout = cl ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous;
      torch::manual_seed(7);
      std::vector<torch::Tensor> params;
      for (int t = 0; t < 3; ++t) {
        params.push_back(torch::randn({8, 4, 3, 3, 3}, kCuda).contiguous(layout).requires_grad_(true));
      }
      Optimizer opt(cfg.training, params);
      const torch::Tensor no_inf = torch::zeros({}, torch::TensorOptions().device(kCuda));
      for (int s = 0; s < 3; ++s) {
        torch::manual_seed(90 + s);
        for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes(), kCuda).contiguous(layout);
        opt.clip_grad_norm(opt.grad_norm(), cfg.training.grad_clip_norm);
        opt.step(no_inf);
      }
      std::vector<torch::Tensor> values;
      for (const auto& p : params) {
        EXPECT_EQ(p.is_contiguous(at::MemoryFormat::ChannelsLast3d), cl) << to_string(kind);
        values.push_back(p.detach().cpu().contiguous());
      }
      results.push_back(values);
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_TRUE(torch::allclose(results[0][i], results[1][i], 1e-6, 1e-7)) << to_string(kind) << " tensor " << i;
    }
  }
}

// --- Whole runs through the CLI ---------------------------------------------------------------

std::vector<std::string> column(const fs::path& metrics, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& row : test::read_csv(metrics)) out.push_back(row.at(name));
  return out;
}

TEST_F(GpuFixes, GpuSamplerIsCapturedWithTheStepAndTrainsLikeTheEagerRun) {
  phantom(10, 24, {"g"});
  const auto graph =
      cuda_train("g.yaml", {"--set", "data.cache=gpu", "--set", "augment.flip_prob=0.5", "--set", "training.epochs=3"});
  ASSERT_EQ(graph.exit_code, 0) << graph.output;
  EXPECT_NE(graph.output.find(kSamplerCaptured), std::string::npos) << graph.output;
  EXPECT_NE(graph.output.find(kCaptured), std::string::npos) << graph.output;
  const auto eager =
      cuda_train("g.yaml", {"--set", "data.cache=gpu", "--set", "augment.flip_prob=0.5", "--set", "training.epochs=3",
                            "--set", "training.cuda_graph=off", "--set", "experiment.name=e"});
  ASSERT_EQ(eager.exit_code, 0) << eager.output;
  EXPECT_EQ(eager.output.find(kCaptured), std::string::npos);
  // Deterministic fp32 (tiny_config): the replayed graph runs the eager kernels on the same batches.
  EXPECT_EQ(column(dir / "runs/g/metrics.csv", "train_loss"), column(dir / "runs/e/metrics.csv", "train_loss"));
  EXPECT_EQ(column(dir / "runs/g/metrics.csv", "val_mae"), column(dir / "runs/e/metrics.csv", "val_mae"));
}

TEST_F(GpuFixes, CaptureWhileTheSamplerThreadsSynchroniseWithTheirCopies) {
  phantom(16, 32, {"t"});
  // A slow augmentation and many batches in flight: the threads wait on their staging copies
  // (cudaEventSynchronize) while the loop thread captures.
  const auto r = cuda_train(
      "t.yaml", {"--set", "data.cache=pinned", "--set", "data.workers=3", "--set", "data.prefetch=12", "--set",
                 "augment.affine_prob=1.0", "--set", "data.patch_size=32", "--set", "training.cuda_graph=on", "--set",
                 "training.deterministic=false", "--set", "training.epochs=3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(kCaptured), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("page-locked staging ring"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_csv(dir / "runs/t/metrics.csv").size(), 3u);
}

TEST_F(GpuFixes, DeterministicCudaRunsOfBothTasksRepeatExactly) {
  for (const Task task : {Task::kDose, Task::kSegmentation}) {
    const std::string stem = task == Task::kDose ? "dose" : "seg";
    test::make_phantom(dir / (stem + ".h5"), task, 8, 24);
    test::write_text(dir / (stem + ".yaml"), test::tiny_config(stem + ".h5", stem, task));
    std::vector<std::vector<std::string>> losses, metrics;
    for (const std::string run : {"a", "b"}) {
      // The normal runtime set-up: training.deterministic (tiny_config) sets the cuBLAS workspace
      // and the deterministic cross-entropy; GPU cache and graph as auto picks them.
      const auto r = cuda_train(stem + ".yaml", {"--set", "experiment.name=" + stem + run});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find(kCaptured), std::string::npos) << r.output;
      const fs::path m = dir / "runs" / (stem + run) / "metrics.csv";
      losses.push_back(column(m, "train_loss"));
      metrics.push_back(column(m, task == Task::kDose ? "val_mae" : "val_dice"));
    }
    EXPECT_EQ(losses[0], losses[1]) << stem;
    EXPECT_EQ(metrics[0], metrics[1]) << stem;
  }
}

TEST_F(GpuFixes, ResumeWithGraphAndGpuCacheContinuesBitForBit) {
  phantom(8, 24, {"r"});
  const auto full = cuda_train(
      "r.yaml", {"--set", "data.cache=gpu", "--set", "training.epochs=4", "--set", "training.cuda_graph=on"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NE(full.output.find(kSamplerCaptured), std::string::npos) << full.output;
  // A copy of the run, resumed from its epoch-2 checkpoint, redoes epochs 3 and 4.
  fs::copy(dir / "runs/r", dir / "runs/c", fs::copy_options::recursive);
  const auto resumed =
      cuda_train("r.yaml", {"--set", "data.cache=gpu", "--set", "training.epochs=4", "--set", "training.cuda_graph=on",
                            "--set", "experiment.name=c", "--resume", "runs/c/checkpoints/epoch_0002.pt"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(kCaptured), std::string::npos) << resumed.output;
  EXPECT_EQ(column(dir / "runs/c/metrics.csv", "train_loss"), column(dir / "runs/r/metrics.csv", "train_loss"));
  EXPECT_EQ(column(dir / "runs/c/metrics.csv", "val_mae"), column(dir / "runs/r/metrics.csv", "val_mae"));
}

// plan --device cuda measures the real step (loss, optimizer step, cuDNN autotuning): a small net
// fits and grows with the batch; a step far beyond the GPU is "does not fit", never an error, and
// the device works afterwards.
TEST_F(GpuFixes, PlanMeasuresTheRealStepAndReportsWhatDoesNotFit) {
  ModelConfig m = test::unet_config(4, 8);
  m.deep_supervision = true;
  const int64_t one = measure_step_bytes_cuda(run_training_steps, m, 1, 3, {64, 64, 64}, 1, /*optimizer_states=*/1);
  const int64_t two = measure_step_bytes_cuda(run_training_steps, m, 1, 3, {64, 64, 64}, 2, /*optimizer_states=*/1);
  EXPECT_GT(one, 0);
  EXPECT_LT(one, kStepOutOfMemory);
  EXPECT_GT(two, one);
  ModelConfig regression = m;  // deep supervision is for segmentation (the planner's recipes)
  regression.deep_supervision = false;
  const int64_t dose =
      measure_step_bytes_cuda(run_training_steps, regression, 3, 1, {64, 64, 64}, 1, /*optimizer_states=*/2);
  EXPECT_GT(dose, 0);
  EXPECT_LT(dose, kStepOutOfMemory);
  ModelConfig huge = m;
  huge.base_filters = 64;
  EXPECT_EQ(measure_step_bytes_cuda(run_training_steps, huge, 1, 3, {256, 256, 256}, 64, 1), kStepOutOfMemory);
  EXPECT_THROW(measure_step_bytes_cuda(run_training_steps, m, 3, 1, {64, 64, 64}, 1, 2), ConfigError);
  EXPECT_EQ(torch::ones({4}, torch::TensorOptions().device(kCuda)).sum().item<float>(), 4.0f);
}

}  // namespace
}  // namespace u3d
