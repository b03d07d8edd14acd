// model.dims 2 (issue 37): the U-Nets' 2D form on slices. Its Conv2d network must compute exactly
// what the 3D network with 1-voxel kernels and strides on the slice axis computes (same parameter
// names, the weights unsqueezed), for every architecture and slice axis; model.preset unet2d is the
// slice user's 7.76 M-parameter network; configs that cannot be 2D are refused in one line.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "u3d/core/errors.h"
#include "u3d/core/stage_geometry.h"
#include "u3d/model/channels_last_norm.h"
#include "u3d/model/layout.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

ModelConfig flat(Architecture arch, int64_t slice_axis, bool deep) {
  ModelConfig m = test::unet_config(3, 4);
  m.architecture = arch;
  m.deep_supervision = deep;
  m.dims = 2;
  m.slice_axis = slice_axis;
  if (arch == Architecture::kResEncUNet) m.blocks_per_level = {1, 2, 1};
  return m;
}

// The same network in 3D: kernel 1 and stride 1 on the slice axis, 3 and 2 in-plane.
ModelConfig as_3d(ModelConfig m) {
  m.dims = 3;
  m.kernel_sizes.clear();
  m.strides.clear();
  for (int64_t l = 0; l < m.levels; ++l) {
    Shape3 k = {3, 3, 3}, s = l == 0 ? Shape3{1, 1, 1} : Shape3{2, 2, 2};
    k[static_cast<size_t>(m.slice_axis)] = 1;
    s[static_cast<size_t>(m.slice_axis)] = 1;
    m.kernel_sizes.push_back(k);
    m.strides.push_back(s);
  }
  return m;
}

// Copies `from`'s (2D) parameters and buffers into `to` (3D), unsqueezing 4-D weights on the slice axis.
void copy_into(const Network& from, const Network& to, int64_t slice_axis) {
  torch::NoGradGuard no_grad;
  auto dst = to->named_parameters();
  for (const auto& p : from->named_parameters()) {
    ASSERT_TRUE(dst.contains(p.key())) << p.key();
    const torch::Tensor v = p.value().dim() == 4 ? p.value().unsqueeze(slice_axis + 2) : p.value();
    ASSERT_EQ(dst[p.key()].sizes(), v.sizes()) << p.key();
    dst[p.key()].copy_(v);
  }
  ASSERT_EQ(from->named_parameters().size(), dst.size());
}

TEST(UNet2d, EqualsThe3dNetworkWithFlatKernelsForEveryArchitectureAndSliceAxis) {
  for (const Architecture arch : {Architecture::kUNet, Architecture::kResEncUNet}) {
    for (const int64_t axis : {0, 1, 2}) {
      const ModelConfig m2 = flat(arch, axis, /*deep=*/true);
      torch::manual_seed(3);
      const Network net2 = build_network(m2, 2, 3);
      const Network net3 = build_network(as_3d(m2), 2, 3);
      copy_into(net2, net3, axis);
      EXPECT_EQ(net2->size_divisors(), net3->size_divisors());
      Shape3 expect = {4, 4, 4};
      expect[static_cast<size_t>(axis)] = 1;
      EXPECT_EQ(net2->size_divisors(), expect);
      for (const auto& p : net2->named_parameters()) {
        if (p.key().find("conv.weight") != std::string::npos) EXPECT_EQ(p.value().dim(), 4) << p.key();
      }
      std::vector<int64_t> shape = {3, 2, 8, 12, 16};
      shape[static_cast<size_t>(axis) + 2] = 1;
      const torch::Tensor x = torch::randn(shape);
      const auto a = net2->forward_deep(x), b = net3->forward_deep(x);
      ASSERT_EQ(a.size(), 2u);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].sizes(), b[i].sizes());
        EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-4, 1e-5)) << "arch " << to_string(arch) << " axis " << axis;
      }
      std::vector<int64_t> out = shape;
      out[1] = 3;
      EXPECT_EQ(a[0].sizes().vec(), out);
      // Gradients reach every parameter of the 2D network.
      torch::Tensor loss = a[0].square().mean() + a[1].square().mean();
      loss.backward();
      for (const auto& p : net2->named_parameters()) {
        if (p.key().find("norm") != std::string::npos) continue;  // zero-initialised residual norms
        EXPECT_TRUE(p.value().grad().defined()) << p.key();
      }
    }
  }
}

TEST(UNet2d, PresetIsTheSliceUsersNetworkAndThePatchBecomesASlice) {
  const Config cfg = load_config_from_string(
      "data: {path: x.h5, patch_size: 256, batch_size: 16}\nmodel: {preset: unet2d}\n", "slices.yaml");
  EXPECT_EQ(cfg.model.dims, 2);
  EXPECT_EQ(cfg.data.patch_size, (Shape3{1, 256, 256}));
  EXPECT_EQ(cfg.model.levels, 5);
  EXPECT_EQ(cfg.model.norm, Norm::kBatch);
  const Network net = build_network(cfg.model, 1, 1);
  // tests/python/buda_reference.py BudaUNet2d (the published layer list, max-pooling) and the 2D UNet
  // both count 7,762,465 (ctest slices.mirror runs them).
  EXPECT_EQ(count_parameters(*net), 7762465);
  EXPECT_EQ(net->named_parameters()["encoder0.0.conv.weight"].sizes(), (torch::IntArrayRef{32, 1, 3, 3}));
  EXPECT_EQ(net->named_parameters()["up3.weight"].sizes(), (torch::IntArrayRef{512, 256, 2, 2}));
  EXPECT_EQ(net->size_divisors(), (Shape3{1, 16, 16}));
  net->eval();
  torch::NoGradGuard no_grad;
  EXPECT_EQ(net->forward(torch::randn({2, 1, 1, 32, 48})).sizes(), (torch::IntArrayRef{2, 1, 1, 32, 48}));
  // Conv FLOPs: 2D convolutions counted by the same observer (the voxel probe is 1 x 16 x 16).
  EXPECT_EQ(forward_flops(*net, {1, 256, 256}, 1), count_conv_flops([&] {
              (void)net->forward(torch::zeros({1, 1, 1, 256, 256}));
            }));
}

TEST(UNet2d, SliceAxisOrientsThePatchAndWrongConfigsAreOneLineErrors) {
  const Config sag = load_config_from_string(
      "data: {path: x.h5, patch_size: 64, slice_axis: 2}\nmodel: {dims: 2, levels: 3}\n", "sag.yaml");
  EXPECT_EQ(sag.data.patch_size, (Shape3{64, 64, 1}));
  EXPECT_EQ(sag.model.slice_axis, 2);
  EXPECT_EQ(stage_stride(sag.model, 1), (Shape3{2, 2, 1}));
  EXPECT_EQ(stage_kernel(sag.model, 0), (Shape3{3, 3, 1}));
  const auto refused = [](const std::string& yaml, const std::string& needle) {
    try {
      load_config_from_string(yaml, "bad.yaml");
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  refused("data: {path: x.h5, patch_size: [4, 64, 64]}\nmodel: {dims: 2, levels: 3}\n",
          "data.patch_size: [4, 64, 64] must be 1 on data.slice_axis 0 for model.dims 2 (e.g. [1, 64, 64])");
  refused("data: {path: x.h5, patch_size: 64}\nmodel: {dims: 2, architecture: openkbp_baseline}\n",
          "model.dims: 2 applies to model.architecture unet and resenc_unet");
  refused("data: {path: x.h5, patch_size: [1, 64, 64]}\nmodel: {dims: 2, levels: 2, strides: [[1, 1, 1], [2, 2, 2]]}\n",
          "with model.dims 2 the slice axis 0 takes stride 1");
  refused(
      "data: {path: x.h5, patch_size: [1, 64, 64]}\nmodel: {dims: 2, levels: 2, kernel_sizes: [[3, 3, 3], [1, 3, "
      "3]]}\n",
      "with model.dims 2 the slice axis 0 takes kernel 1");
  refused("model: {dims: 4}\n", "model.dims");
  refused("data: {slice_axis: 3}\n", "data.slice_axis");
}

TEST(UNet2d, ChannelsLastWeightsAndInputsGiveTheSameOutput) {
  ModelConfig m = flat(Architecture::kUNet, 0, /*deep=*/false);
  torch::manual_seed(5);
  const Network net = build_network(m, 1, 2);
  const torch::Tensor x = torch::randn({2, 1, 1, 16, 24});
  net->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor plain = net->forward(x);
  to_channels_last(*net);
  const torch::Tensor w = net->named_parameters()["encoder1.0.conv.weight"];
  EXPECT_TRUE(w.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(net->named_parameters()["encoder0.0.conv.weight"].strides(),  // 1 input channel: strictly NHWC
            (torch::IntArrayRef{9, 1, 3, 1}));
  const torch::Tensor cl = net->forward(x.contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_TRUE(torch::allclose(plain, cl, 1e-4, 1e-5));
  set_layout(*net, /*channels_last=*/false);
  EXPECT_TRUE(net->named_parameters()["encoder1.0.conv.weight"].is_contiguous());
}

}  // namespace
}  // namespace u3d
