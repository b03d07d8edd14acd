// Training step on CPU: autocast scope, loss scaler, TrainStep in fp32/bf16, channels-last layout,
// and the convolution FLOP counter.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "batches.h"
#include "cpu_step.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/model/layout.h"
#include "u3d/model/unet.h"
#include "u3d/train/amp.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

TEST(AutocastGuard, EnablesRestoresAndNests) {
  const at::ScalarType before = at::autocast::get_autocast_dtype(at::kCPU);
  ASSERT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kBFloat16);
    {
      AutocastGuard inner(at::kCPU, at::kHalf, /*cache_enabled=*/false);
      EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kHalf);
      EXPECT_FALSE(at::autocast::is_autocast_cache_enabled());
    }
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kBFloat16);
    EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), before);
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCUDA));  // another device type untouched
}

TEST(AutocastGuard, Bf16ConvolutionsOnCpuAndFloat32Outside) {
  torch::manual_seed(1);
  const auto x = torch::randn({1, 2, 8, 8, 8});
  const auto w = torch::randn({3, 2, 3, 3, 3});
  {
    AutocastGuard autocast(at::kCPU, at::kBFloat16);
    const auto y = torch::conv3d(x, w, {}, 1, 1);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    // The step computes its loss outside the guard on a float32 copy of the output.
  }
  EXPECT_EQ(torch::conv3d(x, w, {}, 1, 1).scalar_type(), at::kFloat);
}

std::vector<torch::Tensor> params_with_grads(const std::vector<float>& grads) {
  std::vector<torch::Tensor> params;
  for (const float g : grads) {
    auto p = torch::zeros({2}, torch::requires_grad());
    p.mutable_grad() = torch::full({2}, g);
    params.push_back(p);
  }
  return params;
}

TEST(GradScaler, UnscalesFlagsInfAndBacksOffOrGrows) {
  GradScaler::Options o;
  o.growth_interval = 2;
  GradScaler scaler(torch::kCPU, o);
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 65536.0);
  auto params = params_with_grads({65536.0f, 2 * 65536.0f});
  auto found = scaler.unscale_(params);
  EXPECT_EQ(found.item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(params[0].grad(), torch::full({2}, 1.0f)));
  EXPECT_TRUE(torch::equal(params[1].grad(), torch::full({2}, 2.0f)));
  scaler.update(found);
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker_value(), 1);
  scaler.update(found);  // growth_interval clean steps: the scale doubles, the tracker restarts
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 131072.0);
  EXPECT_EQ(scaler.growth_tracker_value(), 0);

  params = params_with_grads({1.0f, std::numeric_limits<float>::infinity()});
  found = scaler.unscale_(params);
  EXPECT_EQ(found.item<float>(), 1.0f);
  scaler.update(found);
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 65536.0);  // backed off by 0.5
  EXPECT_EQ(scaler.growth_tracker_value(), 0);
  params = params_with_grads({std::nanf("")});
  scaler.update(scaler.unscale_(params));
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 32768.0);

  scaler.load(1024.0, 7);
  EXPECT_DOUBLE_EQ(scaler.scale_value(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker_value(), 7);
}

TEST(Precision, ResolvesPerDeviceAndRefusesFp16OnCpu) {
  TrainingConfig t;
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(resolve_precision(t, Norm::kInstance, torch::kCPU), Precision::kFp32);
  EXPECT_EQ(resolve_precision(t, Norm::kInstance, cuda), Precision::kBf16);
  t.precision = Precision::kBf16;
  EXPECT_EQ(resolve_precision(t, Norm::kInstance, torch::kCPU), Precision::kBf16);
  EXPECT_EQ(resolve_precision(t, Norm::kBatch, cuda), Precision::kBf16);  // set: kept, whatever the norm
  t.precision = Precision::kFp16;
  EXPECT_THROW(resolve_precision(t, Norm::kInstance, torch::kCPU), ConfigError);
  EXPECT_EQ(resolve_precision(t, Norm::kInstance, cuda), Precision::kFp16);
  EXPECT_FALSE(autocast_dtype(Precision::kFp32).has_value());
  EXPECT_EQ(*autocast_dtype(Precision::kBf16), at::kBFloat16);
}

// training.precision: auto on CUDA follows the norm: fp16 (loss scaling) for batch norm, which
// cuDNN cannot run in bf16; bf16 for the others. The CPU stays fp32 whatever the norm.
TEST(Precision, AutoPicksFp16ForBatchNormAndBf16OtherwiseOnCuda) {
  const TrainingConfig t;  // auto
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(resolve_precision(t, Norm::kBatch, cuda), Precision::kFp16);
  EXPECT_EQ(resolve_precision(t, Norm::kInstance, cuda), Precision::kBf16);
  EXPECT_EQ(resolve_precision(t, Norm::kGroup, cuda), Precision::kBf16);
  EXPECT_EQ(resolve_precision(t, Norm::kNone, cuda), Precision::kBf16);
  for (const Norm n : {Norm::kBatch, Norm::kInstance, Norm::kGroup, Norm::kNone}) {
    EXPECT_EQ(resolve_precision(t, n, torch::kCPU), Precision::kFp32);
  }
  EXPECT_EQ(precision_reason(t, Norm::kBatch, cuda),
            "auto: fp16 with loss scaling (batch norm: cuDNN has no bf16 batch norm)");
  EXPECT_EQ(precision_reason(t, Norm::kGroup, cuda), "auto: bf16 (group norm: no loss scaler needed)");
  ModelConfig kbp;  // the OpenKBP baseline is a batch-norm network whatever model.norm says
  kbp.architecture = Architecture::kOpenKbpBaseline;
  EXPECT_EQ(resolve_precision(t, network_norm(kbp), cuda), Precision::kFp16);
}

// A tiny model and a fixed sequence of batches, trained for `steps` steps on CPU.
struct TinyRun {
  std::vector<float> losses;
  std::vector<float> skipped;
  torch::Tensor first_weight;
};

Config tiny_cfg(Precision precision, Toggle channels_last) {
  Config cfg = test::step_config(precision, channels_last);
  cfg.training.grad_clip_norm = 1.0;
  return cfg;
}

Batch tiny_batch(int64_t i) { return test::random_batch(100 + static_cast<uint64_t>(i)); }

TinyRun train_tiny(const Config& config, int64_t steps, int64_t inf_at = -1) {
  test::CpuStep cpu_step(config, LossKind::kMaskedL1, /*monitored=*/true, [&](Network& n) {
    if (resolve_channels_last(config.model, torch::kCPU)) to_channels_last(*n);
  });
  auto& [cfg, net, loss, opt, monitor, step] = cpu_step;
  int64_t i = 0;
  if (inf_at >= 0) {
    step.set_after_backward([&](const std::vector<torch::Tensor>& params) {
      if (i != inf_at) return;
      plant_value(params[0].mutable_grad(), std::numeric_limits<float>::infinity());  // any layout
    });
  }
  TinyRun run;
  for (i = 0; i < steps; ++i) {
    const torch::Tensor l = step.run(tiny_batch(i));
    EXPECT_EQ(l.scalar_type(), torch::kFloat);  // the loss is float32 in every precision
    run.losses.push_back(l.item<float>());
    run.skipped.push_back(step.found_inf().item<float>());
  }
  run.first_weight = net->parameters()[0].detach().clone().contiguous();
  return run;
}

TEST(TrainStep, Bf16LossesFollowFp32WithinTolerance) {
  const TinyRun fp32 = train_tiny(tiny_cfg(Precision::kFp32, Toggle::kOff), 4);
  const TinyRun bf16 = train_tiny(tiny_cfg(Precision::kBf16, Toggle::kOff), 4);
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    EXPECT_NEAR(bf16.losses[i], fp32.losses[i], 0.03 * std::abs(fp32.losses[i]) + 1e-3) << "step " << i;
    EXPECT_EQ(bf16.skipped[i], 0.0f);
  }
  EXPECT_NE(bf16.losses[0], fp32.losses[0]);  // bf16 did round: the guard was on
  EXPECT_LT(fp32.losses.back(), fp32.losses.front() * 1.5);
}

TEST(TrainStep, ChannelsLastTrainsLikeContiguous) {
  const TinyRun contiguous = train_tiny(tiny_cfg(Precision::kFp32, Toggle::kOff), 3);
  const TinyRun cl = train_tiny(tiny_cfg(Precision::kFp32, Toggle::kOn), 3);
  for (size_t i = 0; i < contiguous.losses.size(); ++i) {
    EXPECT_NEAR(cl.losses[i], contiguous.losses[i], 1e-4 * std::abs(contiguous.losses[i]) + 1e-6) << "step " << i;
  }
  EXPECT_TRUE(torch::allclose(cl.first_weight, contiguous.first_weight, 1e-4, 1e-5));
}

TEST(TrainStep, AnInfGradientSkipsExactlyThatStep) {
  const TinyRun clean = train_tiny(tiny_cfg(Precision::kBf16, Toggle::kOff), 3);
  const TinyRun faulty = train_tiny(tiny_cfg(Precision::kBf16, Toggle::kOff), 3, /*inf_at=*/1);
  EXPECT_EQ(faulty.skipped, (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(faulty.losses[0], clean.losses[0]);
  EXPECT_EQ(faulty.losses[1], clean.losses[1]);  // same weights before the skipped step
  EXPECT_NE(faulty.losses[2], clean.losses[2]);  // one update fewer
}

// Without clipping and without a scaler the step takes its Inf/NaN flag from the loss alone (no
// gradient norm): a NaN input still skips the step and leaves the weights as they were.
TEST(TrainStep, ANanLossSkipsTheStepWithoutClipping) {
  Config config = test::step_config(Precision::kFp32, Toggle::kOff);
  config.training.grad_clip_norm = 0.0;
  test::CpuStep cpu_step(config, LossKind::kMaskedL1, /*monitored=*/false);
  auto& [cfg, net, loss, opt, monitor, step] = cpu_step;
  step.run(tiny_batch(0));
  EXPECT_EQ(step.found_inf().item<float>(), 0.0f);
  const torch::Tensor before = net->parameters()[0].detach().clone();
  Batch bad = tiny_batch(1);
  plant_value(bad.image, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(step.run(bad).item<float>()));
  EXPECT_EQ(step.found_inf().item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(net->parameters()[0].detach(), before));
  EXPECT_EQ(opt.steps_applied(), 1);
  step.run(tiny_batch(2));  // the next step applies again
  EXPECT_EQ(step.found_inf().item<float>(), 0.0f);
  EXPECT_EQ(opt.steps_applied(), 2);
}

// Gradients set to none: a parameter the backward does not reach still gets a zero gradient (the
// fused kernels need every one), and set_to_none false keeps the tensors (data-parallel views).
TEST(Optimizer, ZeroGradToNoneAndMissingGradientsFilled) {
  auto used = torch::ones({3}, torch::requires_grad());
  auto unused = torch::ones({2}, torch::requires_grad());
  TrainingConfig t;
  t.weight_decay = 0.0;
  Optimizer opt(t, {used, unused});
  const void* kept = used.grad().data_ptr();
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(used.grad().data_ptr(), kept);
  opt.zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(used.grad().defined());
  (used * 2).sum().backward();
  EXPECT_FALSE(unused.grad().defined());
  opt.fill_missing_grads();
  EXPECT_TRUE(torch::equal(used.grad(), torch::full({3}, 2.0f)));
  EXPECT_TRUE(torch::equal(unused.grad(), torch::zeros({2})));
  opt.step(torch::zeros({}));
  EXPECT_TRUE(torch::equal(unused.detach(), torch::ones({2})));  // a zero gradient, no decay: unchanged
  EXPECT_FALSE(torch::equal(used.detach(), torch::ones({3})));
}

TEST(TrainStep, RefusesFp16AndCudaGraphsOnCpu) {
  Network net = build_network(tiny_cfg(Precision::kFp32, Toggle::kOff).model, 2, 1);
  const Loss loss(LossKind::kL1);
  Optimizer opt(TrainingConfig{}, net->parameters());
  Config fp16 = tiny_cfg(Precision::kFp16, Toggle::kOff);
  EXPECT_THROW(TrainStep(fp16, torch::kCPU, *net, loss, opt, nullptr), ConfigError);
  Config graph = tiny_cfg(Precision::kFp32, Toggle::kOff);
  graph.training.cuda_graph = Toggle::kOn;
  EXPECT_THROW(TrainStep(graph, torch::kCPU, *net, loss, opt, nullptr), ConfigError);
  graph.training.cuda_graph = Toggle::kAuto;  // auto: eager on CPU, with the reason
  TrainStep eager(graph, torch::kCPU, *net, loss, opt, nullptr);
  EXPECT_FALSE(eager.features().cuda_graph);
  EXPECT_EQ(eager.features().cuda_graph_note, "not on CPU");
}

TEST(ChannelsLast, WeightsTakeTheLayoutAndGiveTheSameOutput) {
  ModelConfig m = test::unet_config(3);
  torch::manual_seed(2);
  Network a = build_network(m, 2, 1);
  torch::manual_seed(2);
  Network b = build_network(m, 2, 1);
  to_channels_last(*b);
  int64_t converted = 0;
  for (const auto& p : b->parameters()) {
    if (p.dim() != 5) continue;
    EXPECT_TRUE(p.is_contiguous(at::MemoryFormat::ChannelsLast3d));
    if (p.size(1) > 1 && p[0][0].numel() > 1) EXPECT_FALSE(p.is_contiguous());  // really NDHWC strides
    ++converted;
  }
  EXPECT_GT(converted, 0);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({1, 2, 16, 16, 16});
  const auto ya = a->forward(x);
  const auto yb = b->forward(x.contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_TRUE(torch::allclose(ya, yb, 1e-4, 1e-5));
}

TEST(Flops, CountsConvolutionsAndTransposedConvolutionsByHand) {
  // conv 3 -> 5, k 3, stride 2, padding 1 on 9x8x6: output 5x4x3 = 60 voxels, 5*3*27 weights.
  const auto x = torch::randn({2, 3, 9, 8, 6});
  const auto w = torch::randn({5, 3, 3, 3, 3});
  EXPECT_EQ(count_conv_flops([&] { (void)torch::conv3d(x, w, {}, 2, 1); }), 2 * 2 * 60 * 5 * 3 * 27);
  // transposed 3 -> 4, k 2, stride 2 on 9x8x6 input voxels: each input voxel meets every weight.
  const auto wt = torch::randn({3, 4, 2, 2, 2});
  EXPECT_EQ(count_conv_flops([&] { (void)torch::conv_transpose3d(x, wt, {}, 2); }), 2 * 2 * (9 * 8 * 6) * 3 * 4 * 8);
  EXPECT_EQ(count_conv_flops([&] { (void)torch::relu(x); }), 0);
}

TEST(Flops, ForwardFlopsOfATinyUNetMatchTheHandCount) {
  ModelConfig m = test::unet_config(3);  // filters 4, 8, 16; two 3x3x3 convs per level
  Network net = build_network(m, 1, 1);
  // MACs at 16^3 (hand count): encoder 442368 + 1769472 | 442368 + 884736 | 221184 + 442368;
  // up 16->8 (k2 s2, 4^3 inputs) 65536; decoder 1769472 + 884736; up 8->4 (8^3 inputs) 131072;
  // decoder 3538944 + 1769472; head 1x1x1 4->1 16384. Sum 12378112 MACs.
  EXPECT_EQ(forward_flops(*net, {16, 16, 16}, 1), 2 * int64_t{12378112});
  // Scaled from the size_divisor() probe == counted at the full patch.
  torch::NoGradGuard no_grad;
  const auto x = torch::zeros({1, 1, 32, 16, 24});
  EXPECT_EQ(forward_flops(*net, {32, 16, 24}, 1), count_conv_flops([&] { (void)net->forward(x); }));
  EXPECT_TRUE(net->is_training());  // mode restored
}

// The OpenKBP baseline's convolution layout (scripts/bench/pytorch_step.py, OpenKbpBaseline):
// six 4x4x4 stride-2 convolutions down (f, 2f, 4f, 8f, 8f, 8f), five 4x4x4 stride-2 transposed
// convolutions up (8f, 8f, 4f, 2f, f) taking the skip concatenations, a final transposed
// convolution to 1 channel. Norms, activations and pooling do not change the count.
class OpenKbpLayoutImpl : public NetworkImpl {
 public:
  OpenKbpLayoutImpl(int64_t in, int64_t f) {
    const std::vector<int64_t> enc = {f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f};
    int64_t prev = in;
    for (size_t i = 0; i < enc.size(); ++i) {
      down_.push_back(register_module(
          fmt::format("down{}", i), torch::nn::Conv3d(torch::nn::Conv3dOptions(prev, enc[i], 4).stride(2).padding(1))));
      prev = enc[i];
    }
    const std::vector<int64_t> dec = {8 * f, 8 * f, 4 * f, 2 * f, f};
    const std::vector<int64_t> skip = {0, enc[4], enc[3], enc[2], enc[1]};
    for (size_t i = 0; i < dec.size(); ++i) {
      up_.push_back(
          register_module(fmt::format("up{}", i),
                          torch::nn::ConvTranspose3d(
                              torch::nn::ConvTranspose3dOptions(prev + skip[i], dec[i], 4).stride(2).padding(1))));
      prev = dec[i];
    }
    final_ = register_module("final", torch::nn::ConvTranspose3d(
                                          torch::nn::ConvTranspose3dOptions(prev + enc[0], 1, 4).stride(2).padding(1)));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    std::vector<torch::Tensor> e;
    torch::Tensor y = x;
    for (auto& d : down_) e.push_back(y = torch::leaky_relu(d(y), 0.2));
    for (size_t i = 0; i < up_.size(); ++i) {
      if (i > 0) y = torch::cat({y, e[5 - i]}, 1);
      y = torch::relu(up_[i](y));
    }
    return final_(torch::cat({y, e[0]}, 1));
  }
  int64_t size_divisor() const override { return 64; }

 private:
  std::vector<torch::nn::Conv3d> down_;
  std::vector<torch::nn::ConvTranspose3d> up_;
  torch::nn::ConvTranspose3d final_{nullptr};
};

// Forward MACs of that layout by hand, at f filters, c input channels, n^3 voxels.
int64_t openkbp_macs(int64_t f, int64_t c, int64_t n) {
  const std::vector<int64_t> enc = {f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f};
  int64_t macs = 0, prev = c, s = n;
  for (const int64_t e : enc) {
    s /= 2;
    macs += s * s * s * e * prev * 64;  // output voxels x C_out x C_in x 4^3
    prev = e;
  }
  const std::vector<int64_t> dec = {8 * f, 8 * f, 4 * f, 2 * f, f};
  const std::vector<int64_t> skip = {0, enc[4], enc[3], enc[2], enc[1]};
  for (size_t i = 0; i < dec.size(); ++i) {
    macs += s * s * s * (prev + skip[i]) * dec[i] * 64;  // input voxels x C_in x C_out x 4^3
    s *= 2;
    prev = dec[i];
  }
  return macs + s * s * s * (prev + enc[0]) * 64;
}

TEST(Flops, OpenKbpBaselineLayoutMatchesTheHandCount) {
  auto net = std::make_shared<OpenKbpLayoutImpl>(11, 4);
  EXPECT_EQ(forward_flops(*net, {128, 128, 128}, 11), 2 * openkbp_macs(4, 11, 128));
  // At 64 filters (the OpenKBP baseline, 116,975,361 parameters): 0.2153 TFLOP per sample forward,
  // so a batch-2 training step is 3 x 2 x that = 1.29 TFLOP.
  EXPECT_EQ(2 * openkbp_macs(64, 11, 128), int64_t{215285235712});
}

}  // namespace
}  // namespace u3d
