// 2D U-Nets on slices on CUDA (model.dims 2, issue 37): the Conv2d network's step in bf16 with
// channels-last weights captures in a CUDA graph and follows the eager step; its forward on the GPU
// equals the CPU's; a 2D run trains from the GPU cache (device sampler, in-plane augmentation) with
// the captured step. Skips itself where no CUDA device is present.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "batches.h"
#include "devices.h"
#include "test_support.h"
#include "u3d/core/run.h"
#include "u3d/model/layout.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

using test::kCuda;

Config slice_cfg(Toggle graph) {
  Config cfg = test::cuda_batch_norm_config(4, 16, Precision::kBf16);
  cfg.data.path = "unused.h5";
  cfg.model.dims = 2;
  cfg.model.activation = Activation::kRelu;
  cfg.training.cuda_graph = graph;
  cfg.training.graph_warmup_steps = 2;
  cfg.training.lr = 1e-3;
  return cfg;
}

// Batch i: 16 slices (16, 1, 1, 64, 64) on the GPU.
Batch slice_batch(int64_t i) {
  torch::manual_seed(2000 + static_cast<uint64_t>(i));
  Batch b;
  b.image = torch::randn({16, 1, 1, 64, 64});
  b.target = torch::rand({16, 1, 1, 64, 64});
  b.mask = torch::ones({16, 1, 1, 64, 64});
  return b.to(kCuda);
}

struct SliceRun {
  std::vector<float> losses;
  bool replayed = false;
};

SliceRun train(const Config& cfg, int64_t steps) {
  init_cuda_allocator();
  torch::manual_seed(5);
  Network net = build_network(cfg.model, 1, 1);
  net->to(kCuda);
  to_channels_last(*net);
  const Loss loss(LossKind::kMaskedL1);
  Optimizer opt(cfg.training, net->parameters());
  TrainStep step(cfg, kCuda, *net, loss, opt, nullptr);
  SliceRun run;
  for (int64_t i = 0; i < steps; ++i) run.losses.push_back(step.run(slice_batch(i)).item<float>());
  run.replayed = step.replayed();
  return run;
}

TEST(GpuSlices, Conv2dStepCapturesInBf16AndFollowsEager) {
  U3D_REQUIRE_CUDA();
  const SliceRun eager = train(slice_cfg(Toggle::kOff), 8), graph = train(slice_cfg(Toggle::kOn), 8);
  EXPECT_FALSE(eager.replayed);
  EXPECT_TRUE(graph.replayed);
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    EXPECT_NEAR(graph.losses[i], eager.losses[i], 2e-2 * std::abs(eager.losses[i]) + 1e-3) << i;
  }
  EXPECT_LT(graph.losses.back(), graph.losses.front());
}

TEST(GpuSlices, Conv2dForwardOnTheGpuEqualsTheCpu) {
  U3D_REQUIRE_CUDA();
  at::globalContext().setAllowTF32CuDNN(false);
  Config cfg = slice_cfg(Toggle::kOff);
  cfg.model.norm = Norm::kInstance;
  torch::manual_seed(9);
  Network net = build_network(cfg.model, 1, 3);
  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({4, 1, 1, 48, 64});
  const torch::Tensor cpu = net->forward(x);
  net->to(kCuda);
  to_channels_last(*net);
  const torch::Tensor gpu = net->forward(x.to(kCuda).contiguous(at::MemoryFormat::ChannelsLast3d)).cpu();
  at::globalContext().setAllowTF32CuDNN(true);
  EXPECT_TRUE(torch::allclose(gpu, cpu, 1e-3, 1e-4)) << (gpu - cpu).abs().max().item<float>();
}

TEST(GpuSlices, TrainsFromTheGpuCacheWithTheCapturedStep) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  auto r = test::run_trainer(
      {"synth", "--task", "segmentation", "--cases", "6", "--size", "16,64,64", "--out", "seg.h5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::write_text(
      dir / "s.yaml",
      "experiment: {name: s}\ndata: {path: seg.h5, batch_size: 32, patch_size: [1, 64, 64], cache: gpu, "
      "foreground_fraction: 0.5}\naugment: {flip_axes: [2], affine_prob: 0.5, affine_rotation: [30, 0, 0], "
      "elastic_prob: 0.3}\nmodel: {preset: unet2d, levels: 4, base_filters: 8}\n"
      "training: {epochs: 3, device: cuda, cuda_graph: on}\nlogging: {progress_seconds: 0}\n");
  r = test::run_trainer({"train", "-c", "s.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("captured in a CUDA graph"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 3/3"), std::string::npos) << r.output;
  r = test::run_trainer({"predict", "-c", "s.yaml", "--set", "predict.split=val"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace u3d
