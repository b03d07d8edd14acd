// Batch norm on a 4-D view of channels-last 3D tensors (model/channels_last_batch_norm.h) against
// torch::nn::BatchNorm3d's own forward: outputs, gradients, running statistics and
// num_batches_tracked in training (with a momentum and with the cumulative average), eval mode, the
// 2D-slice shape (N, C, 1, H, W), the layout kept, and the plain forward for contiguous input.
#include <gtest/gtest.h>

#include "devices.h"
#include "u3d/model/channels_last_batch_norm.h"

namespace u3d {
namespace {

using test::kCl;

struct Pair {
  torch::nn::BatchNorm3d ours{nullptr}, plain{nullptr};
};

// Two equal modules with non-trivial affine parameters.
Pair make_pair(torch::nn::BatchNorm3dOptions options) {
  torch::manual_seed(3);
  Pair p{torch::nn::BatchNorm3d(options), torch::nn::BatchNorm3d(options)};
  torch::NoGradGuard no_grad;
  p.ours->weight.copy_(torch::rand({options.num_features()}) + 0.5);
  p.ours->bias.copy_(torch::randn({options.num_features()}));
  p.plain->weight.copy_(p.ours->weight);
  p.plain->bias.copy_(p.ours->bias);
  return p;
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-5))
      << what << ": max diff " << (a - b).abs().max().item<double>();
}

// Steps of training then one eval pass on (N, C, D, H, W) = shape, ours on NDHWC, plain on NCDHW.
void check(torch::nn::BatchNorm3dOptions options, std::vector<int64_t> shape) {
  Pair p = make_pair(options);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor base = torch::randn(shape) * (step + 1) + step;
    const torch::Tensor proj = torch::randn(shape);
    torch::Tensor x1 = base.contiguous(kCl).requires_grad_(), x2 = base.clone().requires_grad_();
    ASSERT_FALSE(x1.is_contiguous());
    const torch::Tensor y1 = channels_last_batch_norm(*p.ours, x1);
    const torch::Tensor y2 = p.plain->forward(x2);
    EXPECT_TRUE(y1.is_contiguous(kCl)) << "the output keeps the channels-last layout";
    expect_close(y1, y2, "output");
    (y1 * proj).sum().backward();
    (y2 * proj).sum().backward();
    expect_close(x1.grad(), x2.grad(), "input gradient");
    expect_close(p.ours->weight.grad(), p.plain->weight.grad(), "weight gradient");
    expect_close(p.ours->bias.grad(), p.plain->bias.grad(), "bias gradient");
    expect_close(p.ours->running_mean, p.plain->running_mean, "running mean");
    expect_close(p.ours->running_var, p.plain->running_var, "running variance");
    EXPECT_EQ(p.ours->num_batches_tracked.item<int64_t>(), step + 1);
    EXPECT_EQ(p.plain->num_batches_tracked.item<int64_t>(), step + 1);
  }
  p.ours->eval();
  p.plain->eval();
  const torch::Tensor base = torch::randn(shape) * 2;
  expect_close(channels_last_batch_norm(*p.ours, base.contiguous(kCl)), p.plain->forward(base), "eval output");
  EXPECT_EQ(p.ours->num_batches_tracked.item<int64_t>(), 3) << "eval does not count batches";
}

TEST(ChannelsLastBatchNorm, EqualsBatchNorm3dInTrainingAndEval) {
  check(torch::nn::BatchNorm3dOptions(6), {3, 6, 4, 5, 7});
}

TEST(ChannelsLastBatchNorm, CumulativeAverageWithoutMomentum) {
  check(torch::nn::BatchNorm3dOptions(5).momentum(std::nullopt).eps(1e-3), {2, 5, 3, 4, 6});
}

TEST(ChannelsLastBatchNorm, SliceShapeOfTheTwoDimensionalNets) {
  check(torch::nn::BatchNorm3dOptions(8), {4, 8, 1, 9, 10});  // model.dims 2, slice axis 0
  check(torch::nn::BatchNorm3dOptions(8), {4, 8, 9, 10, 1});  // slice axis 2
}

TEST(ChannelsLastBatchNorm, ContiguousInputTakesThePlainForward) {
  Pair p = make_pair(torch::nn::BatchNorm3dOptions(4));
  const torch::Tensor x = torch::randn({2, 4, 3, 3, 3});
  const torch::Tensor y1 = channels_last_batch_norm(*p.ours, x);
  const torch::Tensor y2 = p.plain->forward(x.clone());
  EXPECT_TRUE(y1.is_contiguous());
  EXPECT_TRUE(torch::equal(y1, y2)) << "bit for bit: the same call";
  EXPECT_TRUE(torch::equal(p.ours->running_mean, p.plain->running_mean));
}

TEST(ChannelsLastBatchNorm, ApplyNormDispatchesByModuleType) {
  Pair p = make_pair(torch::nn::BatchNorm3dOptions(4));
  torch::nn::AnyModule bn(p.ours);
  const torch::Tensor x = torch::randn({2, 4, 3, 3, 3}).contiguous(kCl);
  const torch::Tensor y = apply_norm(bn, x);
  EXPECT_TRUE(y.is_contiguous(kCl));
  expect_close(y, p.plain->forward(x.contiguous()), "batch norm through apply_norm");
  EXPECT_EQ(p.ours->num_batches_tracked.item<int64_t>(), 1);
  torch::nn::AnyModule in(torch::nn::InstanceNorm3d(torch::nn::InstanceNorm3dOptions(4)));
  EXPECT_TRUE(
      torch::allclose(apply_norm(in, x), torch::instance_norm(x, {}, {}, {}, {}, true, 0.1, 1e-5, false), 1e-5, 1e-5));
}

}  // namespace
}  // namespace u3d
