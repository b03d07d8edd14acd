#include <gtest/gtest.h>

#include <map>

#include "fixtures.h"
#include "u3d/model/mean_pool.h"
#include "u3d/model/openkbp_baseline.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

ModelConfig small(int64_t levels, Norm norm) {
  ModelConfig m = test::unet_config(levels);
  m.norm = norm;
  return m;
}

TEST(UNet, OutputShapeMatchesInputForSeveralConfigs) {
  for (int64_t levels : {1, 2, 3, 4}) {
    for (Norm norm : {Norm::kBatch, Norm::kInstance, Norm::kGroup, Norm::kNone}) {
      auto net = build_network(small(levels, norm), 3, 2);
      const auto x = torch::randn({2, 3, 16, 8, 24});
      const auto y = net->forward(x);
      EXPECT_EQ(y.sizes(), (torch::IntArrayRef{2, 2, 16, 8, 24})) << "levels " << levels;
      EXPECT_EQ(net->size_divisor(), int64_t{1} << (levels - 1));
    }
  }
}

TEST(UNet, ParameterCountMatchesHandCount) {
  // levels 2, base 4, 2 convs/level, k3, instance norm (affine), in 2, out 1:
  // enc0: conv 2->4 (216) + norm (8) + conv 4->4 (432) + norm (8)
  // enc1: conv 4->8 s2 (864) + norm (16) + conv 8->8 (1728) + norm (16)
  // up0:  convT 8->4 k2 (256 + 4 bias)
  // dec0: conv 8->4 (864) + norm (8) + conv 4->4 (432) + norm (8)
  // head: conv 4->1 k1 (4 + 1 bias)                                        = 4865
  auto net = build_network(small(2, Norm::kInstance), 2, 1);
  EXPECT_EQ(count_parameters(*net), 4865);
  // Without norm every convolution has a bias instead: -64 norm, +4+4+8+8+4+4 bias = 4833.
  EXPECT_EQ(count_parameters(*build_network(small(2, Norm::kNone), 2, 1)), 4833);
}

TEST(UNet, FiltersAreCapped) {
  ModelConfig m = small(5, Norm::kInstance);
  m.base_filters = 32;
  m.max_filters = 100;
  UNet3dImpl net(m, 1, 1);
  EXPECT_EQ(net.filters(), (std::vector<int64_t>{32, 64, 100, 100, 100}));
}

TEST(UNet, OutputActivationIsApplied) {
  ModelConfig m = small(2, Norm::kInstance);
  m.output_activation = OutputActivation::kRelu;
  auto net = build_network(m, 1, 1);
  EXPECT_GE(net->forward(torch::randn({1, 1, 8, 8, 8})).min().item<float>(), 0.0f);
}

TEST(UNet, BackwardReachesEveryParameter) {
  ModelConfig m = small(3, Norm::kBatch);
  m.dropout = 0.1;
  auto net = build_network(m, 2, 3);
  net->forward(torch::randn({2, 2, 8, 8, 8})).sum().backward();
  for (const auto& p : net->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
  }
}

ModelConfig openkbp_baseline(int64_t f) {
  ModelConfig m;
  m.architecture = Architecture::kOpenKbpBaseline;
  m.base_filters = f;
  return m;
}

// The challenge's network at f = 64 with CT + 10 masks: convolution kernels 116,969,472, the final
// transposed convolution's bias 1, batch-norm scales and shifts 2 x 2,944 = 5,888.
TEST(OpenKbpBaseline, HasExactlyTheChallengesParameterCount) {
  auto net = build_network(openkbp_baseline(64), /*in_channels=*/11, /*out_channels=*/1);
  EXPECT_EQ(count_parameters(*net), 116975361);
  EXPECT_EQ(net->size_divisor(), 64);
}

TEST(OpenKbpBaseline, LayersAndShapesForASmallNetwork) {
  const int64_t f = 2;
  auto net = build_network(openkbp_baseline(f), 11, 1);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : net->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  // 6 convs, 5 encoder BN (weight + bias), 5 transposed convs, 5 decoder BN, head weight + bias.
  EXPECT_EQ(shapes.size(), 6u + 10u + 5u + 10u + 2u);
  EXPECT_EQ(shapes.at("down1.weight"), (std::vector<int64_t>{f, 11, 4, 4, 4}));
  EXPECT_EQ(shapes.at("down6.weight"), (std::vector<int64_t>{8 * f, 8 * f, 4, 4, 4}));
  EXPECT_EQ(shapes.count("down6_norm.weight"), 0u);  // no batch norm on the bottleneck
  EXPECT_EQ(shapes.count("down1.bias"), 0u);
  EXPECT_EQ(shapes.at("up1.weight"), (std::vector<int64_t>{8 * f, 8 * f, 4, 4, 4}));   // (in, out, k, k, k)
  EXPECT_EQ(shapes.at("up2.weight"), (std::vector<int64_t>{16 * f, 8 * f, 4, 4, 4}));  // [x5b, x5]
  EXPECT_EQ(shapes.at("up5.weight"), (std::vector<int64_t>{4 * f, f, 4, 4, 4}));       // [x2b, x2]
  EXPECT_EQ(shapes.at("head.weight"), (std::vector<int64_t>{2 * f, 1, 4, 4, 4}));      // [x1b, x1]
  EXPECT_EQ(shapes.at("head.bias"), (std::vector<int64_t>{1}));
  for (const auto& m : net->modules(/*include_self=*/false)) {
    if (auto* bn = m->as<torch::nn::BatchNorm3d>()) {
      EXPECT_DOUBLE_EQ(bn->options.momentum().value(), 0.01);
      EXPECT_DOUBLE_EQ(bn->options.eps(), 1e-3);
    }
  }
  net->eval();
  const auto y = net->forward(torch::randn({2, 11, 64, 64, 64}));
  EXPECT_EQ(y.sizes(), (torch::IntArrayRef{2, 1, 64, 64, 64}));
  EXPECT_GE(y.min().item<float>(), 0.0f);  // final ReLU
  net->train();
  net->forward(torch::randn({2, 11, 64, 128, 64})).sum().backward();
  for (const auto& p : net->named_parameters()) ASSERT_TRUE(p.value().grad().defined()) << p.key();
}

// 3x3x3 average pooling with 'same' padding leaves the padded voxels out of the average, as
// Keras's AveragePooling3D(padding="same"): a constant output stays constant up to the border.
TEST(OpenKbpBaseline, FinalPoolingIgnoresPadding) {
  auto net = std::make_shared<OpenKbpBaselineImpl>(openkbp_baseline(1), 1, 1);
  torch::NoGradGuard no_grad;
  for (auto& p : net->named_parameters()) {
    if (p.key() == "head.bias") {
      p.value().fill_(2.0);
    } else if (p.key().find("norm") == std::string::npos) {
      p.value().zero_();  // every convolution outputs 0: the head gives its bias everywhere
    }
  }
  net->eval();
  const auto y = net->forward(torch::randn({1, 1, 64, 64, 64}));
  EXPECT_TRUE(torch::allclose(y, torch::full_like(y, 2.0))) << "min " << y.min().item<float>();
}

// The residual block's skip pooling by a view and a mean (deterministic on CUDA) is avg_pool3d(s, s):
// values and gradients, contiguous and channels-last, sizes that divide by the stride and sizes that
// do not.
TEST(MeanPool, EqualsAvgPoolForwardAndBackward) {
  namespace F = torch::nn::functional;
  torch::manual_seed(3);
  for (const auto& size : std::vector<std::vector<int64_t>>{{2, 3, 8, 8, 8}, {1, 4, 9, 7, 10}}) {
    for (const bool channels_last : {false, true}) {
      for (const int64_t stride : {2, 3}) {
        torch::Tensor base = torch::randn(size, torch::kDouble);
        if (channels_last) base = base.contiguous(torch::MemoryFormat::ChannelsLast3d);
        const torch::Tensor a = base.clone().requires_grad_(true);
        const torch::Tensor b = base.clone().requires_grad_(true);
        const torch::Tensor ours = mean_pool3d(a, stride, /*by_view=*/true);
        const torch::Tensor ref = F::avg_pool3d(b, F::AvgPool3dFuncOptions(stride).stride(stride));
        EXPECT_TRUE(torch::equal(mean_pool3d(b.detach(), stride, /*by_view=*/false), ref.detach()));
        ASSERT_EQ(ours.sizes(), ref.sizes());
        EXPECT_TRUE(torch::allclose(ours, ref, /*rtol=*/1e-12, /*atol=*/1e-12));
        const torch::Tensor up = torch::randn(ref.sizes(), torch::kDouble);
        (ours * up).sum().backward();
        (ref * up).sum().backward();
        EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), /*rtol=*/1e-12, /*atol=*/1e-12));
      }
    }
  }
  const torch::Tensor x = torch::randn({1, 2, 4, 4, 4});
  EXPECT_TRUE(mean_pool3d(x, 1, /*by_view=*/true).is_same(x));
}

}  // namespace
}  // namespace u3d
