// The channels-last instance norm (model/channels_last_norm.h) on CUDA: equal to at::instance_norm +
// relu in bf16 (forward and gradients), and captured with its backward in a CUDA graph whose replay
// on new input values gives the eager result (no host reads, no dynamic shapes).
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "devices.h"
#include "u3d/model/channels_last_batch_norm.h"
#include "u3d/model/channels_last_norm.h"

namespace u3d {
namespace {

using test::kCl;

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>() /
         std::max(b.to(torch::kFloat).abs().max().item<double>(), 1e-12);
}

TEST(ChannelsLastNormCuda, EqualsInstanceNormInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const torch::Tensor base = (torch::randn({2, 32, 16, 16, 16}, opts) * 3 + 1).to(torch::kBFloat16);
  torch::Tensor x1 = base.contiguous(kCl).requires_grad_(), x2 = base.clone().requires_grad_();
  torch::Tensor w1 = (torch::rand({32}, opts) + 0.5).requires_grad_(), b1 = torch::randn({32}, opts).requires_grad_();
  torch::Tensor w2 = w1.detach().clone().requires_grad_(), b2 = b1.detach().clone().requires_grad_();
  const torch::Tensor proj = torch::randn({2, 32, 16, 16, 16}, opts);
  const torch::Tensor y1 = channels_last_norm(x1, w1, b1, /*groups=*/0, 1e-5, NormActivation::kRelu);
  EXPECT_TRUE(y1.is_contiguous(kCl));
  const torch::Tensor y2 = torch::relu(torch::instance_norm(x2, w2, b2, {}, {}, true, 0.1, 1e-5, true));
  (y1.to(torch::kFloat) * proj).sum().backward();
  (y2.to(torch::kFloat) * proj).sum().backward();
  EXPECT_LT(rel(y1, y2), 3e-2);
  EXPECT_LT(rel(x1.grad(), x2.grad()), 3e-2);
  EXPECT_LT(rel(w1.grad(), w2.grad()), 3e-2);
  EXPECT_LT(rel(b1.grad(), b2.grad()), 3e-2);
}

TEST(ChannelsLastNormCuda, ForwardAndBackwardCaptureInACudaGraph) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(3);
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor x = torch::randn({2, 16, 8, 8, 8}, opts).to(torch::kBFloat16).contiguous(kCl).requires_grad_();
  torch::Tensor w = torch::ones({16}, opts).requires_grad_(), b = torch::zeros({16}, opts).requires_grad_();
  auto step = [&] {
    const torch::Tensor y = channels_last_norm(x, w, b, /*groups=*/0, 1e-5, NormActivation::kRelu);
    y.to(torch::kFloat).square().sum().backward();
    return y;
  };
  const auto side = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();  // the inputs are ready before the side stream uses them
  torch::Tensor y_static;
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 2; ++i) {  // warm-up on the side stream (allocator pools, lazy init)
      x.mutable_grad() = torch::Tensor();
      (void)step();
    }
    x.mutable_grad() = torch::zeros_like(x);
    w.mutable_grad() = torch::zeros_like(w);
    b.mutable_grad() = torch::zeros_like(b);
    graph.capture_begin();
    y_static = step();
    graph.capture_end();
  }
  torch::cuda::synchronize();
  // New values in place, replay, compare with an eager run on the same values.
  {
    torch::NoGradGuard no_grad;
    x.copy_(torch::randn({2, 16, 8, 8, 8}, opts));
    x.grad().zero_();
  }
  graph.replay();
  torch::cuda::synchronize();
  const torch::Tensor y_graph = y_static.clone(), dx_graph = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  const torch::Tensor y_eager = step();
  EXPECT_LT(rel(y_graph, y_eager.detach()), 1e-6);
  EXPECT_LT(rel(dx_graph, x.grad()), 1e-6);
}

// Batch norm on the 4-D view (model/channels_last_batch_norm.h) on CUDA in bf16, the path ATen's
// cuDNN dispatch refuses: equal to BatchNorm3d's forward on NCDHW (output, gradients, running
// statistics), NDHWC kept, for a 3D shape and the 2D nets' (N, C, 1, H, W).
TEST(ChannelsLastBatchNormCuda, EqualsBatchNorm3dInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::vector<int64_t> shape : {std::vector<int64_t>{2, 32, 8, 16, 16}, {16, 32, 1, 64, 64}}) {
    torch::manual_seed(4);
    const auto opts = torch::TensorOptions().device(torch::kCUDA);
    torch::nn::BatchNorm3d ours(32), plain(32);
    ours->to(torch::kCUDA);
    plain->to(torch::kCUDA);
    const torch::Tensor base = (torch::randn(shape, opts) * 2 + 1).to(torch::kBFloat16);
    torch::Tensor x1 = base.contiguous(kCl).requires_grad_(), x2 = base.clone().requires_grad_();
    const torch::Tensor proj = torch::randn(shape, opts);
    const torch::Tensor y1 = channels_last_batch_norm(*ours, x1);
    const torch::Tensor y2 = plain->forward(x2);
    EXPECT_TRUE(y1.is_contiguous(kCl));
    EXPECT_EQ(y1.scalar_type(), torch::kBFloat16);
    (y1.to(torch::kFloat) * proj).sum().backward();
    (y2.to(torch::kFloat) * proj).sum().backward();
    EXPECT_LT(rel(y1, y2), 3e-2);
    EXPECT_LT(rel(x1.grad(), x2.grad()), 3e-2);
    EXPECT_LT(rel(ours->weight.grad(), plain->weight.grad()), 3e-2);
    EXPECT_LT(rel(ours->running_var, plain->running_var), 1e-2);
    EXPECT_EQ(ours->num_batches_tracked.item<int64_t>(), 1);
  }
}

}  // namespace
}  // namespace u3d
