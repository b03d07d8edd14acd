// model.preset mlperf_unet3d (model/mlperf_unet3d.h): the preset's keys, the reference's parameter
// names and count, the forward shape, and the keys the architecture refuses. The comparison with
// the PyTorch reference itself is tests/bundle/mlperf_mirror_test.sh.
#include <gtest/gtest.h>

#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/model/mlperf_unet3d.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

Config preset(const std::vector<std::string>& overrides = {}) {
  return load_config_from_string("data: {path: x.h5, patch_size: 128}\nmodel: {preset: mlperf_unet3d}\n", "test",
                                 overrides);
}

TEST(MlperfUNet3d, PresetSetsTheReferenceNetwork) {
  const ModelConfig m = preset().model;
  EXPECT_EQ(m.architecture, Architecture::kMlperfUNet3d);
  EXPECT_EQ(m.levels, 6);
  EXPECT_EQ(m.base_filters, 32);
  EXPECT_EQ(m.max_filters, 320);
  EXPECT_EQ(m.kernel_size, 3);
  EXPECT_EQ(m.norm, Norm::kInstance);
  EXPECT_EQ(m.activation, Activation::kRelu);
  EXPECT_FALSE(m.deep_supervision);
  // A key the config sets wins over the preset.
  EXPECT_EQ(preset({"model.norm=batch"}).model.norm, Norm::kBatch);
}

TEST(MlperfUNet3d, ReferenceParameterNamesAndCount) {
  auto net = build_network(preset().model, /*in_channels=*/1, /*out_channels=*/3);
  EXPECT_EQ(count_parameters(*net), 31190243);  // the reference's 31.19 M
  EXPECT_EQ(net->size_divisor(), 32);
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  ASSERT_EQ(names.size(), 78u);
  const std::vector<std::string> first = {"input_block.conv1.0.weight", "input_block.conv1.1.weight",
                                          "input_block.conv1.1.bias",   "input_block.conv2.0.weight",
                                          "input_block.conv2.1.weight", "input_block.conv2.1.bias",
                                          "downsample.0.conv1.0.weight"};
  EXPECT_EQ(std::vector<std::string>(names.begin(), names.begin() + 7), first);
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const char* n : {"downsample.3.conv2.1.bias", "bottleneck.conv1.0.weight", "bottleneck.conv2.1.weight",
                        "upsample.0.upsample_conv.0.weight", "upsample.0.upsample_conv.0.bias",
                        "upsample.4.conv2.1.bias", "output.conv.0.weight", "output.conv.0.bias"}) {
    EXPECT_TRUE(has(n)) << n;
  }
  EXPECT_FALSE(has("downsample.4.conv1.0.weight"));
  EXPECT_FALSE(has("input_block.conv1.0.bias")) << "no convolution bias in front of a norm";
  const auto params = net->named_parameters();
  EXPECT_EQ(params["upsample.0.upsample_conv.0.weight"].sizes(), (torch::IntArrayRef{320, 320, 2, 2, 2}));
  EXPECT_EQ(params["upsample.0.conv1.0.weight"].sizes(), (torch::IntArrayRef{320, 640, 3, 3, 3}));
  EXPECT_EQ(params["upsample.4.upsample_conv.0.weight"].sizes(), (torch::IntArrayRef{64, 32, 2, 2, 2}));
  EXPECT_EQ(params["bottleneck.conv1.0.weight"].sizes(), (torch::IntArrayRef{320, 320, 3, 3, 3}));
  EXPECT_EQ(params["output.conv.0.weight"].sizes(), (torch::IntArrayRef{3, 32, 1, 1, 1}));
}

TEST(MlperfUNet3d, ForwardShapeAndFlops) {
  Config cfg = preset({"model.base_filters=4", "model.max_filters=8", "model.levels=4"});
  auto net = build_network(cfg.model, 1, 3);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(net->forward(torch::randn({2, 1, 16, 8, 24})).sizes(), (torch::IntArrayRef{2, 3, 16, 8, 24}));
  // The full network at 128^3: 0.955 TFLOP per sample forward (the header's figure).
  auto full = build_network(preset().model, 1, 3);
  EXPECT_EQ(forward_flops(*full, {128, 128, 128}, 1), 954597376000);
}

TEST(MlperfUNet3d, RefusesKeysTheReferenceLacks) {
  EXPECT_THROW(preset({"model.deep_supervision=true"}), ConfigError);
  EXPECT_THROW(preset({"model.dropout=0.1"}), ConfigError);
  EXPECT_THROW(preset({"model.activation_checkpointing=all"}), ConfigError);
  EXPECT_THROW(preset({"data.patch_size=48"}), ConfigError);  // must divide by 32
}

}  // namespace
}  // namespace u3d
