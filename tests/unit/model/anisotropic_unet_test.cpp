// Per-stage, per-axis kernels and strides in the U-Nets (model.kernel_sizes, model.strides; issue
// 39), and the proof that the defaults build today's networks parameter for parameter.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "fixtures.h"
#include "u3d/core/sha256.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

// "name [d0, d1, ...]" per parameter, sorted by name, one per line.
std::string parameter_list(const torch::nn::Module& net) {
  std::vector<std::string> lines;
  for (const auto& item : net.named_parameters()) {
    lines.push_back(fmt::format("{} [{}]", item.key(), fmt::join(item.value().sizes(), ", ")));
  }
  std::sort(lines.begin(), lines.end());
  return fmt::format("{}", fmt::join(lines, "\n"));
}

ModelConfig resenc_config() {
  ModelConfig m = test::unet_config(4, 8);
  m.architecture = Architecture::kResEncUNet;
  m.convs_per_level = 1;
  m.deep_supervision = true;
  return m;
}

// The numbers were taken from scripts/python/u3d_model.py (the network's Python twin, which the
// export tests hold equal to the C++ one) before model.kernel_sizes and model.strides existed:
// same names, same shapes, same count, so existing checkpoints load unchanged.
TEST(AnisotropicUNet, DefaultsKeepTodaysParameterNamesShapesAndCounts) {
  ModelConfig unet;  // the defaults: levels 4, base 16
  unet.deep_supervision = true;
  const Network a = build_network(unet, 1, 3);
  EXPECT_EQ(a->named_parameters().size(), 54u);
  EXPECT_EQ(count_parameters(*a), 1401593);
  EXPECT_EQ(sha256_hex(parameter_list(*a)), "d7c563cc82d0284504bb6a47780d4906c6b41edc5e940a641e5c6035963d25d9");
  const Network b = build_network(resenc_config(), 2, 3);
  EXPECT_EQ(b->named_parameters().size(), 149u);
  EXPECT_EQ(count_parameters(*b), 1621897);
  EXPECT_EQ(sha256_hex(parameter_list(*b)), "0380c7ea2c7edd9a66be6155072075e641bf735737c13ebada4024c364f072a9");

  // The defaults written out as lists build the same network.
  ModelConfig spelled = unet;
  spelled.kernel_sizes.assign(4, Shape3{3, 3, 3});
  spelled.strides = {{1, 1, 1}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}};
  EXPECT_EQ(parameter_list(*build_network(spelled, 1, 3)), parameter_list(*a));
  EXPECT_EQ(a->size_divisors(), (Shape3{8, 8, 8}));
  EXPECT_EQ(a->size_divisor(), 8);
}

ModelConfig thick_slice(Architecture architecture) {
  ModelConfig m = test::unet_config(4, 4);
  m.architecture = architecture;
  m.deep_supervision = true;
  m.kernel_sizes = {{1, 3, 3}, {3, 3, 3}, {3, 3, 3}, {3, 3, 3}};
  m.strides = {{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {2, 2, 2}};
  if (architecture == Architecture::kResEncUNet) m.blocks_per_level = {1, 2, 1, 1};
  return m;
}

TEST(AnisotropicUNet, KernelsStridesAndEveryOutputFollowThePerAxisStrides) {
  for (const Architecture arch : {Architecture::kUNet, Architecture::kResEncUNet}) {
    const ModelConfig m = thick_slice(arch);
    const Network net = build_network(m, 1, 2);
    const auto params = net->named_parameters();
    EXPECT_EQ(params["encoder0.0.conv.weight"].sizes(), (torch::IntArrayRef{4, 1, 1, 3, 3}));
    EXPECT_EQ(params["up0.weight"].sizes(), (torch::IntArrayRef{8, 4, 1, 2, 2}));  // kernel = stride of stage 1
    EXPECT_EQ(params["up1.weight"].sizes(), (torch::IntArrayRef{16, 8, 2, 2, 2}));
    EXPECT_EQ(params["decoder0.0.conv.weight"].sizes(), (torch::IntArrayRef{4, 8, 1, 3, 3}));  // stage 0's kernel
    EXPECT_EQ(net->size_divisors(), (Shape3{4, 8, 8}));
    EXPECT_EQ(net->size_divisor(), 8);

    const torch::Tensor x = torch::randn({2, 1, 4, 16, 24});  // D only divides by 4
    const auto outs = net->forward_deep(x);
    ASSERT_EQ(outs.size(), 3u);
    EXPECT_EQ(outs[0].sizes(), (torch::IntArrayRef{2, 2, 4, 16, 24}));
    EXPECT_EQ(outs[1].sizes(), (torch::IntArrayRef{2, 2, 4, 8, 12}));  // stage 1: (1, 2, 2)
    EXPECT_EQ(outs[2].sizes(), (torch::IntArrayRef{2, 2, 2, 4, 6}));   // stage 2: (2, 4, 4)
    EXPECT_EQ(net->forward(x).sizes(), outs[0].sizes());
    torch::Tensor loss = outs[0].square().mean();
    for (size_t i = 1; i < outs.size(); ++i) loss = loss + outs[i].square().mean();
    loss.backward();
    for (const auto& p : net->named_parameters()) {
      if (p.key().find("norm") != std::string::npos) continue;  // zero-initialised residual norms may stay 0
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
    }
  }
}

TEST(AnisotropicUNet, FlopsFromTheDivisorProbeEqualTheFullPatchCount) {
  const Network net = build_network(thick_slice(Architecture::kUNet), 1, 2);
  net->eval();
  const Shape3 patch = {8, 16, 24};
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::zeros({1, 1, patch[0], patch[1], patch[2]});
  const int64_t full = count_conv_flops([&] { (void)net->forward(x); });
  EXPECT_EQ(forward_flops(*net, patch, 1), full);
}

}  // namespace
}  // namespace u3d
