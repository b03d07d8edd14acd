// CPU checks of the fixes to the GPU paths (issue: the first GPU run must work): each defect that
// can show on the CPU is reproduced here; the rest are in tests/gpu/.
#include <gtest/gtest.h>

#include <cstdlib>

#include "batches.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/run.h"
#include "u3d/model/autocast.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/openkbp_baseline.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

const torch::Device kCudaDevice(torch::kCUDA, 0);  // only as a value: nothing runs there

Config tiny_cfg(Toggle channels_last) { return test::step_config(Precision::kFp32, channels_last); }

Batch tiny_batch(int64_t i) { return test::random_batch(300 + static_cast<uint64_t>(i)); }

// Defect 1: the injected-Inf hook wrote through grad().view(-1), which throws for the gradient of
// a channels-last weight. plant_value() works for any layout; the step with channels-last on skips.
TEST(GpuPathFixes, InjectedInfWorksWithChannelsLastGradients) {
  torch::Tensor cl = torch::zeros({2, 3, 4, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast3d);
  ASSERT_FALSE(cl.is_contiguous());
  plant_value(cl, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isinf(cl[0][0][0][0][0].item<float>()));
  EXPECT_EQ(torch::isinf(cl).sum().item<int64_t>(), 1);

  const Config cfg = tiny_cfg(Toggle::kOn);
  torch::manual_seed(5);
  Network net = build_network(cfg.model, 2, 1);
  to_channels_last(*net);
  const Loss loss(LossKind::kMaskedL1);
  Optimizer opt(cfg.training, net->parameters());
  ASSERT_TRUE(opt.params()[0].grad().is_contiguous(at::MemoryFormat::ChannelsLast3d));
  StepMonitor monitor(torch::kCPU);
  TrainStep step(cfg, torch::kCPU, *net, loss, opt, &monitor);
  int64_t i = 0;
  step.set_after_backward([&](const std::vector<torch::Tensor>& params) {
    if (i == 1) plant_value(params[0].mutable_grad(), std::numeric_limits<float>::infinity());
  });
  std::vector<float> skipped;
  for (i = 0; i < 3; ++i) {
    step.run(tiny_batch(i));
    skipped.push_back(step.found_inf().item<float>());
  }
  EXPECT_EQ(skipped, (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(opt.steps_applied(), 2);
  EXPECT_EQ(monitor.totals().skipped, 1);  // the monitor is updated inside the step
}

// Defect 2: cross_entropy on 5-D input is nll_loss2d, which has no deterministic CUDA kernel; the
// deterministic formulation gives the same value and gradient.
TEST(GpuPathFixes, DeterministicCrossEntropyEqualsCrossEntropy) {
  torch::manual_seed(7);
  const torch::Tensor logits = torch::randn({2, 4, 6, 5, 7}, torch::kDouble).requires_grad_(true);
  const torch::Tensor labels = torch::randint(0, 4, {2, 6, 5, 7}, torch::kLong);
  const torch::Tensor a = torch::nn::functional::cross_entropy(logits, labels);
  const torch::Tensor ga = torch::autograd::grad({a}, {logits})[0];
  const torch::Tensor b = cross_entropy_loss_deterministic(logits, labels);
  const torch::Tensor gb = torch::autograd::grad({b}, {logits})[0];
  EXPECT_EQ(b.scalar_type(), torch::kFloat);  // computed in float32, as the loss always is
  EXPECT_NEAR(b.item<double>(), a.item<double>(), 1e-5);
  EXPECT_TRUE(torch::allclose(gb.to(torch::kDouble), ga, 1e-6, 1e-7));
  // On the CPU the ordinary path is kept, deterministic mode or not.
  EXPECT_NEAR(u3d::cross_entropy_loss(logits, labels).item<double>(), a.item<double>(), 1e-5);
}

// Defect 2: the OpenKBP baseline's head average (avg_pool3d, no deterministic CUDA backward) as a
// depthwise convolution: same values and gradients, borders included.
TEST(GpuPathFixes, BaselineHeadAverageByConvolutionEqualsAvgPool) {
  torch::manual_seed(8);
  const torch::Tensor y = torch::randn({2, 3, 5, 6, 4}, torch::kDouble).requires_grad_(true);
  const torch::Tensor a = same_mean3(y, /*by_convolution=*/false);
  const torch::Tensor b = same_mean3(y, /*by_convolution=*/true);
  EXPECT_TRUE(torch::allclose(a, b, 1e-12, 1e-12));
  const torch::Tensor w = torch::randn_like(a);
  const torch::Tensor ga = torch::autograd::grad({(a * w).sum()}, {y})[0];
  const torch::Tensor gb = torch::autograd::grad({(b * w).sum()}, {y})[0];
  EXPECT_TRUE(torch::allclose(ga, gb, 1e-12, 1e-12));
}

// Defect 2: without CUBLAS_WORKSPACE_CONFIG every cuBLAS call throws under deterministic
// algorithms; init_runtime sets it (before CUDA starts) unless the user did.
TEST(GpuPathFixes, DeterministicModeSetsTheCublasWorkspaceUnlessTheUserDid) {
  const char* saved = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  const std::string saved_value = saved ? saved : "";
  Config cfg = tiny_cfg(Toggle::kOff);
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  init_runtime(cfg);  // deterministic off: untouched
  EXPECT_EQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  cfg.training.deterministic = true;
  init_runtime(cfg);
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  init_runtime(cfg);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":16:8");
  cfg.training.deterministic = false;
  init_runtime(cfg);  // back to the default global state for the other tests
  if (saved) {
    ::setenv("CUBLAS_WORKSPACE_CONFIG", saved_value.c_str(), 1);
  } else {
    ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  }
}

// Channels-last for every network on CUDA: instance and group norm keep NDHWC
// (model/channels_last_norm.h; issue 33).
TEST(GpuPathFixes, ChannelsLastAutoIsOnForEveryNormOnCuda) {
  ModelConfig m;
  m.norm = Norm::kInstance;
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  EXPECT_NE(channels_last_reason(m, kCudaDevice).find("on with instance norm"), std::string::npos);
  m.norm = Norm::kGroup;
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  m.architecture = Architecture::kMlperfUNet3d;
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  m.architecture = Architecture::kUNet;
  m.norm = Norm::kBatch;
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  m.norm = Norm::kNone;
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  EXPECT_FALSE(resolve_channels_last(m, torch::kCPU));
  EXPECT_EQ(channels_last_reason(m, torch::kCPU), "auto: off on CPU");
  m.norm = Norm::kInstance;
  m.architecture = Architecture::kOpenKbpBaseline;  // batch norm throughout
  EXPECT_TRUE(resolve_channels_last(m, kCudaDevice));
  m.architecture = Architecture::kUNet;
  m.channels_last = Toggle::kOn;
  EXPECT_TRUE(resolve_channels_last(m, torch::kCPU));
  EXPECT_EQ(channels_last_reason(m, torch::kCPU), "model.channels_last: on");
  m.channels_last = Toggle::kOff;
  EXPECT_FALSE(resolve_channels_last(m, kCudaDevice));
}

struct Trained {
  Network net;
  std::unique_ptr<Optimizer> opt;
};

Trained train(const Config& cfg, bool channels_last, int64_t steps) {
  torch::manual_seed(5);
  Trained t{build_network(cfg.model, 2, 1), nullptr};
  if (channels_last) to_channels_last(*t.net);
  t.opt = std::make_unique<Optimizer>(cfg.training, t.net->parameters());
  const Loss loss(LossKind::kMaskedL1);
  TrainStep step(cfg, torch::kCPU, *t.net, loss, *t.opt, nullptr);
  for (int64_t i = 0; i < steps; ++i) step.run(tiny_batch(i));
  return t;
}

// Defect 6: a checkpoint written in one layout loaded into a run of the other gave parameters the
// checkpoint's strides while gradients and moments kept the run's, which the fused optimizer
// refuses. After set_layout + match_parameter_layout every tensor has the run's layout, the values
// are the checkpoint's bit for bit, and training goes on like the run that wrote it.
TEST(GpuPathFixes, ResumeAcrossALayoutChangeKeepsValuesAndTrains) {
  for (const bool saved_cl : {false, true}) {
    const bool run_cl = !saved_cl;
    SCOPED_TRACE(saved_cl ? "channels-last checkpoint into a contiguous run"
                          : "contiguous checkpoint into a channels-last run");
    const Config saved_cfg = tiny_cfg(saved_cl ? Toggle::kOn : Toggle::kOff);
    const Config run_cfg = tiny_cfg(run_cl ? Toggle::kOn : Toggle::kOff);
    test::TempDir dir;
    Trained a = train(saved_cfg, saved_cl, 2);
    CheckpointInfo info;
    info.config_yaml = "data: {path: x.h5}\n";
    save_checkpoint(dir / "c.pt", info, *a.net, a.opt.get());

    torch::manual_seed(99);
    Network b = build_network(run_cfg.model, 2, 1);
    if (run_cl) to_channels_last(*b);
    Optimizer opt(run_cfg.training, b->parameters());
    load_checkpoint(dir / "c.pt", *b, &opt, torch::kCPU, /*restore_rng=*/false);
    set_layout(*b, run_cl);
    opt.match_parameter_layout();
    const auto format = run_cl ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous;
    const auto pa = a.net->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pb.size(); ++i) {
      EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
      if (pb[i].dim() != 5) continue;
      EXPECT_TRUE(pb[i].is_contiguous(format)) << i;
      EXPECT_EQ(pb[i].grad().strides(), pb[i].strides()) << i;
    }
    // One more step from the checkpoint in each layout: the fused optimizer accepts it, and the
    // result equals the writer's own next step to float32 rounding (the layouts' convolutions
    // sum in another order).
    const Loss loss(LossKind::kMaskedL1);
    TrainStep resumed(run_cfg, torch::kCPU, *b, loss, opt, nullptr);
    const float l_resumed = resumed.run(tiny_batch(2)).item<float>();
    TrainStep writer(saved_cfg, torch::kCPU, *a.net, loss, *a.opt, nullptr);
    const float l_writer = writer.run(tiny_batch(2)).item<float>();
    EXPECT_NEAR(l_resumed, l_writer, 1e-5 * std::abs(l_writer) + 1e-6);
    const auto qa = a.net->parameters(), qb = b->parameters();
    for (size_t i = 0; i < qb.size(); ++i) {
      EXPECT_TRUE(torch::allclose(qa[i], qb[i], 1e-4, 1e-6)) << i;
    }
    EXPECT_EQ(opt.steps_applied(), 3);
  }
}

// Validation and prediction run under the training precision's autocast; outputs stay float32.
TEST(GpuPathFixes, SlidingWindowPredictionUnderBf16AutocastStaysFloat32AndClose) {
  ModelConfig m = test::unet_config(2);
  torch::manual_seed(3);
  Network net = build_network(m, 2, 1);
  const torch::Tensor image = torch::randn({2, 20, 18, 16});
  SlidingWindowOptions o = test::window({16, 16, 16}, 2);
  const torch::Tensor fp32 = sliding_window_predict(*net, image, o, torch::kCPU);
  o.autocast = at::kBFloat16;
  o.channels_last = true;
  set_layout(*net, /*channels_last=*/true);
  const torch::Tensor bf16 = sliding_window_predict(*net, image, o, torch::kCPU);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat);
  EXPECT_EQ(bf16.sizes(), fp32.sizes());
  EXPECT_FALSE(torch::equal(bf16, fp32));  // the forward really ran in bf16
  const double rel = ((bf16 - fp32).norm() / fp32.norm()).item<double>();
  EXPECT_LT(rel, 3e-2) << rel;
  Config t;
  t.training.precision = Precision::kFp16;
  EXPECT_FALSE(inference_autocast(t, torch::kCPU).has_value());  // fp16-trained, predicted on CPU: fp32
  EXPECT_EQ(*inference_autocast(t, kCudaDevice), at::kHalf);
  t.training.precision = Precision::kAuto;
  t.model.norm = Norm::kInstance;
  EXPECT_FALSE(inference_autocast(t, torch::kCPU).has_value());
  EXPECT_EQ(*inference_autocast(t, kCudaDevice), at::kBFloat16);
  t.model.norm = Norm::kBatch;  // as training: auto is fp16 for batch norm on CUDA
  EXPECT_EQ(*inference_autocast(t, kCudaDevice), at::kHalf);
}

}  // namespace
}  // namespace u3d
