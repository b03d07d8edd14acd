// The channels-last instance and group norm (model/channels_last_norm.h) against at::instance_norm
// and at::group_norm followed by the activation: forward and gradients on the CPU, in float32 and
// under bf16 and fp16 autocast (a convolution in front makes the reduced-precision input, as in the
// networks); and the layout: NDHWC in, NDHWC out and NDHWC gradients.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "devices.h"
#include "u3d/model/autocast.h"
#include "u3d/model/channels_last_norm.h"

namespace u3d {
namespace {

using test::kCl;

struct Result {
  torch::Tensor y, dx, dconv, dweight, dbias;
};

// conv (autocast casts it) -> norm(+activation) -> a fixed random projection; gradients of all.
Result run(bool ours, int64_t groups, NormActivation act, std::optional<at::ScalarType> autocast) {
  torch::manual_seed(7);
  const int64_t c = 12;
  torch::Tensor x = (torch::randn({2, 3, 6, 5, 7}) * 2 + 0.5).contiguous(kCl).requires_grad_();
  torch::Tensor conv_w = (torch::randn({c, 3, 3, 3, 3}) * 0.2).contiguous(kCl).requires_grad_();
  torch::Tensor weight = (torch::rand({c}) + 0.5).requires_grad_();
  torch::Tensor bias = torch::randn({c}).requires_grad_();
  const torch::Tensor proj = torch::randn({2, c, 6, 5, 7}).contiguous(kCl);
  torch::Tensor y;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(torch::kCPU, *autocast);
    // (2, 12, 6, 5, 7), NDHWC (the CPU's fp16 convolution returns NCDHW: converted here)
    const torch::Tensor h = torch::conv3d(x, conv_w, {}, 1, 1).contiguous(kCl);
    if (autocast) EXPECT_EQ(h.scalar_type(), *autocast);
    if (ours) {
      y = channels_last_norm_kernel(h, weight, bias, groups, 1e-5, act, 0.01);
      EXPECT_TRUE(y.is_contiguous(kCl)) << "the output keeps NDHWC";
    } else {
      y = groups <= 0 ? torch::instance_norm(h, weight, bias, {}, {}, true, 0.1, 1e-5, false)
                      : torch::group_norm(h, groups, weight, bias, 1e-5, false);
      if (act == NormActivation::kRelu) y = torch::relu(y);
      if (act == NormActivation::kLeakyRelu) y = torch::leaky_relu(y, 0.01);
    }
  }
  (y.to(torch::kFloat) * proj).sum().backward();
  return {y.detach().to(torch::kFloat), x.grad(), conv_w.grad(), weight.grad(), bias.grad()};
}

// max |a - b| relative to max |b|
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-12);
}

void expect_close(const Result& a, const Result& b, double tol, const std::string& what) {
  EXPECT_LT(rel(a.y, b.y), tol) << what << ": output";
  EXPECT_LT(rel(a.dx, b.dx), tol) << what << ": input gradient";
  EXPECT_LT(rel(a.dconv, b.dconv), tol) << what << ": convolution weight gradient";
  EXPECT_LT(rel(a.dweight, b.dweight), tol) << what << ": norm weight gradient";
  EXPECT_LT(rel(a.dbias, b.dbias), tol) << what << ": norm bias gradient";
}

TEST(ChannelsLastNorm, EqualsInstanceAndGroupNormInFloat32) {
  for (int64_t groups : {0, 4, 1}) {
    for (auto act : {NormActivation::kNone, NormActivation::kRelu, NormActivation::kLeakyRelu}) {
      const std::string what = fmt::format("float32 groups {} activation {}", groups, static_cast<int>(act));
      expect_close(run(true, groups, act, std::nullopt), run(false, groups, act, std::nullopt), 2e-5, what);
    }
  }
}

TEST(ChannelsLastNorm, EqualsInstanceAndGroupNormUnderBf16AndFp16Autocast) {
  // Both sides see the same reduced-precision convolution output; the tolerance is that of the
  // dtype (bf16 keeps 8 bits, fp16 11), and each is also compared with the float32 computation.
  for (auto [dtype, tol] : {std::pair{at::kBFloat16, 3e-2}, std::pair{at::kHalf, 4e-3}}) {
    for (int64_t groups : {0, 4}) {
      const std::string what = fmt::format("{} groups {}", c10::toString(dtype), groups);
      const Result ours = run(true, groups, NormActivation::kRelu, dtype);
      const Result ref = run(false, groups, NormActivation::kRelu, dtype);
      expect_close(ours, ref, tol, what);
      const Result exact = run(false, groups, NormActivation::kRelu, std::nullopt);
      EXPECT_LT(rel(ours.y, exact.y), 2 * std::max(rel(ref.y, exact.y), tol / 4)) << what << ": vs float32";
    }
  }
}

TEST(ChannelsLastNorm, ContiguousInputsTakeTheAtenOpsBitForBit) {
  torch::manual_seed(3);
  ChannelsLastNorm norm(8, /*groups=*/0);
  const torch::Tensor x = torch::randn({2, 8, 4, 4, 4});
  const torch::Tensor ref = torch::relu(torch::instance_norm(x, norm->weight, norm->bias, {}, {}, true, 0.1, 1e-5,
                                                             at::globalContext().userEnabledCuDNN()));
  EXPECT_TRUE(torch::equal(norm->forward_act(x, NormActivation::kRelu, 0.0), ref));
  ChannelsLastNorm group(8, /*groups=*/2);
  EXPECT_TRUE(torch::equal(group->forward(x), torch::group_norm(x, 2, group->weight, group->bias, 1e-5,
                                                                at::globalContext().userEnabledCuDNN())));
  // Channels-last input: the NDHWC path, an NDHWC output.
  EXPECT_TRUE(norm->forward(x.contiguous(kCl)).is_contiguous(kCl));
  // Same names as torch::nn::InstanceNorm3d(affine) / GroupNorm: checkpoints and the Python mirror.
  const auto params = norm->named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(params.contains("weight") && params.contains("bias"));
  EXPECT_EQ(norm->named_buffers().size(), 0u);
}

TEST(ChannelsLastNorm, GradientsStayChannelsLast) {
  torch::Tensor x = torch::randn({1, 6, 4, 4, 4}).contiguous(kCl).requires_grad_();
  ChannelsLastNorm norm(6, /*groups=*/0);
  norm->forward_act(x, NormActivation::kRelu, 0.0).sum().backward();
  EXPECT_TRUE(x.grad().is_contiguous(kCl));
}

}  // namespace
}  // namespace u3d
