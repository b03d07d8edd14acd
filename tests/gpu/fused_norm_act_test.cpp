// The fused norm + activation kernels (kernels/fused_norm_act.h) on CUDA against the ATen
// composition in float64: batch, instance and group norm, with none, relu and leaky_relu, in
// float32, bfloat16 and float16, at odd sizes, batch 1 and channel counts that are not a multiple
// of 8 (forward, dx, dweight, dbias, batch norm's running statistics); bitwise equal run to run;
// captured with their backward in a CUDA graph and replayed on new values; and a whole training step
// of every network with model.fused_kernels on against off over 20 steps. A test that finds no CUDA
// device skips; one that finds a build without the kernels fails (the GPU box runs the bundle, which
// has them).
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "batches.h"
#include "devices.h"
#include "tensor_compare.h"
#include "u3d/core/run.h"
#include "u3d/kernels/fused_norm_act.h"
#include "u3d/model/fused_kernels.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

using test::kCl;
using test::kCuda;

#define U3D_REQUIRE_KERNELS()                                         \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"; \
  ASSERT_TRUE(kernels::built()) << "this build has no CUDA kernels (kernels/)"

struct NormCase {
  std::vector<int64_t> shape;  // (N, C, D, H, W)
  int64_t groups;              // 0: batch norm; C: instance norm
  double slope;                // relu 0, leaky_relu 0.01, none 1
};

struct Outputs {
  torch::Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// The fused op on x (channels-last, dtype) or the float64 ATen reference (x as float64).
Outputs run_case(const NormCase& k, const torch::Tensor& x0, const torch::Tensor& proj, const torch::Tensor& w0,
                 const torch::Tensor& b0, bool fused) {
  const int64_t c = k.shape[1];
  torch::Tensor x = (fused ? x0 : x0.to(torch::kDouble)).contiguous(fused ? kCl : at::MemoryFormat::Contiguous);
  x.requires_grad_();
  const auto pdt = fused ? torch::kFloat : torch::kDouble;
  torch::Tensor w = w0.to(pdt).requires_grad_(), b = b0.to(pdt).requires_grad_();
  Outputs o;
  o.running_mean = torch::zeros({c}, w0.options().dtype(pdt));
  o.running_var = torch::ones({c}, w0.options().dtype(pdt));
  torch::Tensor y;
  if (fused) {
    const kernels::FusedActivation act{k.slope};
    y = k.groups == 0 ? kernels::batch_norm_act(x, w, b, o.running_mean, o.running_var, 0.1, 1e-5, act)
                      : kernels::group_norm_act(x, w, b, k.groups, 1e-5, act);
    EXPECT_TRUE(y.is_contiguous(kCl));
    EXPECT_EQ(y.scalar_type(), x0.scalar_type());
  } else {
    const torch::Tensor z = k.groups == 0
                                ? torch::batch_norm(x, w, b, o.running_mean, o.running_var, true, 0.1, 1e-5, false)
                                : torch::group_norm(x, k.groups, w, b, 1e-5, false);
    y = torch::where(z > 0, z, z * k.slope);
  }
  (y.to(torch::kDouble) * proj).sum().backward();
  o.y = y.detach();
  o.dx = x.grad();
  o.dweight = w.grad();
  o.dbias = b.grad();
  return o;
}

TEST(FusedNormAct, EqualsAtenForEveryNormDtypeActivationAndShape) {
  U3D_REQUIRE_KERNELS();
  const std::vector<NormCase> cases = {
      {{2, 32, 8, 9, 7}, 0, 0.0},     {{2, 32, 8, 9, 7}, 32, 0.01}, {{2, 32, 8, 9, 7}, 8, 1.0},
      {{1, 13, 5, 6, 7}, 0, 0.01},    {{1, 13, 5, 6, 7}, 13, 0.0},  {{3, 40, 4, 4, 4}, 5, 0.01},
      {{16, 24, 1, 33, 31}, 0, 0.0},  // 2D slices: (N, C, 1, H, W)
      {{2, 320, 4, 4, 4}, 320, 0.01}, {{1, 3, 65, 3, 2}, 0, 1.0},
  };
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const double tol = dtype == torch::kFloat ? 1e-4 : 3e-2;
    for (const NormCase& k : cases) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << " shape " << k.shape[0] << "x" << k.shape[1] << "x"
                                        << k.shape[2] << "x" << k.shape[3] << "x" << k.shape[4] << " groups "
                                        << k.groups << " slope " << k.slope);
      torch::manual_seed(21);
      const auto opts = torch::TensorOptions().device(kCuda);
      const torch::Tensor x = (torch::randn(k.shape, opts) * 2 + 1).to(dtype);
      const torch::Tensor proj = torch::randn(k.shape, opts.dtype(torch::kDouble));
      const torch::Tensor w = torch::rand({k.shape[1]}, opts) + 0.5, b = torch::randn({k.shape[1]}, opts);
      const Outputs ref = run_case(k, x, proj, w, b, /*fused=*/false);
      const Outputs got = run_case(k, x, proj, w, b, /*fused=*/true);
      EXPECT_LT(test::rel_diff(got.y, ref.y), tol);
      EXPECT_LT(test::rel_diff(got.dx, ref.dx), tol);
      EXPECT_LT(test::rel_diff(got.dweight, ref.dweight), tol);
      EXPECT_LT(test::rel_diff(got.dbias, ref.dbias), tol);
      if (k.groups == 0) {
        EXPECT_LT(test::rel_diff(got.running_mean, ref.running_mean), tol);
        EXPECT_LT(test::rel_diff(got.running_var, ref.running_var), tol);
      }
    }
  }
}

TEST(FusedNormAct, RunsAreBitwiseEqual) {
  U3D_REQUIRE_KERNELS();
  const auto opts = torch::TensorOptions().device(kCuda);
  torch::manual_seed(22);
  const NormCase k{{2, 48, 16, 16, 16}, 0, 0.01};
  const torch::Tensor x = torch::randn(k.shape, opts).to(torch::kBFloat16);
  const torch::Tensor proj = torch::randn(k.shape, opts.dtype(torch::kDouble));
  const torch::Tensor w = torch::rand({48}, opts) + 0.5, b = torch::randn({48}, opts);
  for (int64_t groups : {int64_t{0}, int64_t{48}, int64_t{6}}) {
    NormCase g = k;
    g.groups = groups;
    const Outputs a = run_case(g, x, proj, w, b, true), c = run_case(g, x, proj, w, b, true);
    EXPECT_TRUE(torch::equal(a.y, c.y) && torch::equal(a.dx, c.dx) && torch::equal(a.dweight, c.dweight) &&
                torch::equal(a.dbias, c.dbias))
        << "groups " << groups;
  }
}

TEST(FusedNormAct, CapturedWithItsBackwardReplaysOnNewValues) {
  U3D_REQUIRE_KERNELS();
  torch::manual_seed(23);
  const auto opts = torch::TensorOptions().device(kCuda);
  torch::Tensor x = torch::randn({2, 24, 8, 8, 8}, opts).to(torch::kHalf).contiguous(kCl).requires_grad_();
  torch::Tensor w = (torch::rand({24}, opts) + 0.5).requires_grad_(), b = torch::randn({24}, opts).requires_grad_();
  torch::Tensor rm = torch::zeros({24}, opts), rv = torch::ones({24}, opts);
  auto step = [&] {
    const torch::Tensor y1 = kernels::group_norm_act(x, w, b, /*groups=*/6, 1e-5, kernels::FusedActivation::relu());
    const torch::Tensor y2 =
        kernels::batch_norm_act(y1, w, b, rm, rv, 0.1, 1e-5, kernels::FusedActivation::leaky_relu(0.01));
    y2.to(torch::kFloat).square().sum().backward();
    return y2;
  };
  const auto side = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();
  torch::Tensor y_static;
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 2; ++i) {
      x.mutable_grad() = torch::Tensor();
      (void)step();
    }
    for (auto* t : {&x, &w, &b}) t->mutable_grad() = torch::zeros_like(*t);
    graph.capture_begin();
    y_static = step();
    graph.capture_end();
  }
  torch::cuda::synchronize();
  {
    torch::NoGradGuard no_grad;
    x.copy_(torch::randn({2, 24, 8, 8, 8}, opts) * 3);
    for (auto* t : {&x, &w, &b}) t->grad().zero_();
  }
  const torch::Tensor rm_before = rm.clone();
  graph.replay();
  torch::cuda::synchronize();
  const torch::Tensor y_graph = y_static.clone(), dx_graph = x.grad().clone(), dw_graph = w.grad().clone();
  const torch::Tensor rm_graph = rm.clone();
  rm.copy_(rm_before);
  for (auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
  const torch::Tensor y_eager = step();
  EXPECT_TRUE(torch::equal(y_graph, y_eager.detach()));
  EXPECT_TRUE(torch::equal(dx_graph, x.grad()));
  EXPECT_TRUE(torch::equal(dw_graph, w.grad()));
  EXPECT_TRUE(torch::equal(rm_graph, rm));  // the running statistics move inside the graph too
}

// Losses of 20 captured training steps of the network of `cfg` with model.fused_kernels `toggle`.
std::vector<float> train_losses(Config cfg, Toggle toggle, int64_t size) {
  cfg.model.fused_kernels = toggle;
  init_cuda_allocator();
  torch::manual_seed(5);
  Network net = build_network(cfg.model, 2, 1);
  net->to(kCuda);
  to_channels_last(*net);
  const Loss loss(LossKind::kMaskedL1);
  Optimizer opt(cfg.training, net->parameters());
  TrainStep step(cfg, kCuda, *net, loss, opt, nullptr);
  EXPECT_EQ(step.features().fused_kernels, toggle == Toggle::kOn);
  std::vector<float> losses;
  for (int64_t i = 0; i < 20; ++i) {
    Batch b = test::random_batch(3000 + static_cast<uint64_t>(i), 2, size);
    if (cfg.model.dims == 2) {  // slices: (N, C, 1, H, W)
      b.image = b.image.narrow(2, 0, 1), b.target = b.target.narrow(2, 0, 1), b.mask = b.mask.narrow(2, 0, 1);
      b.image = b.image.contiguous(), b.target = b.target.contiguous(), b.mask = b.mask.contiguous();
    }
    losses.push_back(step.run(b.to(kCuda)).item<float>());
  }
  EXPECT_FALSE(kernels::enabled_families() != kernels::kNoFamilies && toggle == Toggle::kOff);
  return losses;
}

TEST(FusedNormAct, TrainingStepsOfEveryNetworkFollowTheUnfusedOnes) {
  U3D_REQUIRE_KERNELS();
  struct Net {
    std::string name;
    Config cfg;
    int64_t size;
  };
  std::vector<Net> nets;
  for (Norm norm : {Norm::kInstance, Norm::kGroup, Norm::kBatch}) {
    Config cfg = test::cuda_batch_norm_config(3, 16, Precision::kBf16);
    cfg.data.path = "unused.h5";
    cfg.model.norm = norm;
    cfg.training.lr = 1e-3;
    nets.push_back({to_string(norm), cfg, 32});
  }
  Config kbp = test::cuda_batch_norm_config(3, 8, Precision::kBf16);
  kbp.data.path = "unused.h5";
  kbp.model.architecture = Architecture::kOpenKbpBaseline;
  kbp.training.lr = 1e-3;
  nets.push_back({"openkbp_baseline", kbp, 64});
  Config mlperf = kbp;
  mlperf.model.architecture = Architecture::kMlperfUNet3d;
  mlperf.model.norm = Norm::kInstance;
  mlperf.model.activation = Activation::kRelu;
  nets.push_back({"mlperf_unet3d", mlperf, 32});
  Config slices = test::cuda_batch_norm_config(4, 16, Precision::kFp16);
  slices.data.path = "unused.h5";
  slices.model.dims = 2;
  slices.model.activation = Activation::kRelu;
  slices.training.lr = 1e-3;
  nets.push_back({"unet 2d", slices, 64});
  for (const Net& n : nets) {
    const std::vector<float> off = train_losses(n.cfg, Toggle::kOff, n.size);
    const std::vector<float> on = train_losses(n.cfg, Toggle::kOn, n.size);
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_NEAR(on[i], off[i], 3e-2 * std::abs(off[i]) + 1e-4) << n.name << " step " << i;
    }
  }
}

}  // namespace
}  // namespace u3d
