#include <gtest/gtest.h>

#include "u3d/unet.h"

namespace u3d {
namespace {

ModelConfig small(int64_t levels, Norm norm) {
  ModelConfig m;
  m.levels = levels;
  m.base_filters = 4;
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

}  // namespace
}  // namespace u3d
