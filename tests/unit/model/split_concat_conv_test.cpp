// model/split_concat_conv.h (issue 53): a convolution over a channel concatenation without the
// concatenation equals the convolution of torch::cat (forward and every gradient, float32 within
// rounding), keeps channels-last, and each network's set_split_concat(true) computes what the
// concatenation computes, with the same parameters.
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include "fixtures.h"
#include "u3d/model/layout.h"
#include "u3d/model/mlperf_unet3d.h"
#include "u3d/model/openkbp_baseline.h"
#include "u3d/model/split_concat_conv.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

// max |a - b| within `rel` of max |b|, or of `floor` when that is larger.
void expect_near(const torch::Tensor& a, const torch::Tensor& b, double rel, const std::string& what,
                 double floor = 0) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  EXPECT_LE(diff, rel * std::max(scale, floor) + 1e-12)
      << what << ": max difference " << diff << " of max " << scale << " (floor " << floor << ")";
}

std::vector<torch::Tensor> random_parts(const std::vector<int64_t>& channels, at::IntArrayRef spatial,
                                        at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  std::vector<torch::Tensor> parts;
  for (int64_t c : channels) {
    std::vector<int64_t> shape = {2, c};
    shape.insert(shape.end(), spatial.begin(), spatial.end());
    parts.push_back(torch::randn(shape).contiguous(format).requires_grad_(true));
  }
  return parts;
}

// conv_over_concat(conv, parts) against conv(cat(parts)): the output, and the gradients of every
// part, the weight and the bias under one random upstream gradient.
template <class Module>
void expect_equals_concat(Module conv, const std::vector<int64_t>& channels, at::IntArrayRef spatial) {
  const std::vector<torch::Tensor> parts = random_parts(channels, spatial);
  std::vector<torch::Tensor> inputs = parts;  // what the gradients are taken of
  inputs.push_back(conv->weight);
  if (conv->bias.defined()) inputs.push_back(conv->bias);
  const torch::Tensor reference = conv(torch::cat(parts, /*dim=*/1));
  const torch::Tensor upstream = torch::randn_like(reference);
  const auto reference_grads = torch::autograd::grad({(reference * upstream).sum()}, inputs);
  const torch::Tensor split = conv_over_concat(*conv, parts);
  expect_near(split, reference, 1e-5, "forward");
  const auto split_grads = torch::autograd::grad({(split * upstream).sum()}, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = i < parts.size()    ? "gradient of part " + std::to_string(i)
                             : i == parts.size() ? "gradient of the weight"
                                                 : "gradient of the bias";
    expect_near(split_grads[i], reference_grads[i], 1e-5, what);
  }
}

TEST(ConvOverConcat, Conv3dEqualsConvOfCat) {
  torch::manual_seed(1);
  using torch::nn::Conv3dOptions;
  expect_equals_concat(torch::nn::Conv3d(Conv3dOptions(8, 5, 3).padding(1)), {4, 4}, {6, 5, 7});
  expect_equals_concat(torch::nn::Conv3d(Conv3dOptions(9, 7, 3).padding(1).bias(false)), {2, 3, 4}, {5, 6, 4});
  expect_equals_concat(torch::nn::Conv3d(Conv3dOptions(7, 3, 3).padding(1).stride(2)), {3, 4}, {7, 6, 5});
  expect_equals_concat(torch::nn::Conv3d(Conv3dOptions(5, 3, {1, 3, 3}).padding({0, 1, 1})), {1, 1, 3}, {3, 6, 6});
}

TEST(ConvOverConcat, Conv2dEqualsConvOfCat) {
  torch::manual_seed(2);
  using torch::nn::Conv2dOptions;
  expect_equals_concat(torch::nn::Conv2d(Conv2dOptions(6, 4, 3).padding(1)), {3, 3}, {9, 8});
  expect_equals_concat(torch::nn::Conv2d(Conv2dOptions(9, 5, 3).padding(1).stride(2)), {5, 1, 3}, {9, 7});
}

TEST(ConvOverConcat, TransposedConvolutionsEqualConvOfCat) {
  torch::manual_seed(3);
  using torch::nn::ConvTranspose3dOptions;
  expect_equals_concat(torch::nn::ConvTranspose3d(ConvTranspose3dOptions(6, 3, 4).stride(2).padding(1)), {3, 3},
                       {3, 4, 3});
  expect_equals_concat(torch::nn::ConvTranspose3d(ConvTranspose3dOptions(7, 5, 2).stride(2).bias(false)), {2, 1, 4},
                       {3, 3, 2});
  expect_equals_concat(torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(5, 4, 2).stride(2)), {2, 3},
                       {5, 4});
}

TEST(ConvOverConcat, RefusesPartsThatDoNotMakeTheInputChannels) {
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(6, 2, 3).padding(1));
  EXPECT_THROW(conv_over_concat(*conv, random_parts({3, 2}, {4, 4, 4})), c10::Error);
  EXPECT_THROW(conv_over_concat(*conv, random_parts({4, 4}, {4, 4, 4})), c10::Error);
}

TEST(ConvOverConcat, ChannelsLastPartsGiveAChannelsLastOutput) {
  torch::manual_seed(4);
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(7, 4, 3).padding(1));
  to_channels_last(*conv);
  const auto parts = random_parts({3, 4}, {4, 5, 6}, at::MemoryFormat::ChannelsLast3d);
  const torch::Tensor y = conv_over_concat(*conv, parts);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  expect_near(y, conv(torch::cat(parts, /*dim=*/1)), 1e-5, "channels-last forward");

  torch::nn::Conv2d conv2(torch::nn::Conv2dOptions(5, 4, 3).padding(1));
  to_channels_last(*conv2);
  const auto parts2 = random_parts({2, 3}, {6, 5}, at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(conv_over_concat(*conv2, parts2).is_contiguous(at::MemoryFormat::ChannelsLast));
}

// A network's output and every gradient (parameters and input), with its switch off and on.
struct Pass {
  torch::Tensor out, input_grad;
  std::map<std::string, torch::Tensor> grads;
  int64_t cats = 0;  // aten::cat calls of the forward pass
};

thread_local int64_t* cat_sink = nullptr;

std::unique_ptr<at::ObserverContext> on_cat(const at::RecordFunction& fn) {
  if (cat_sink && std::string_view(fn.name()) == "aten::cat") ++*cat_sink;
  return nullptr;
}

// net.forward_deep(x), counting its concatenations.
std::vector<torch::Tensor> forward_counting_cats(NetworkImpl& net, const torch::Tensor& x, int64_t* cats) {
  cat_sink = cats;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_cat));
  std::vector<torch::Tensor> outputs = net.forward_deep(x);
  at::removeCallback(handle);
  cat_sink = nullptr;
  return outputs;
}

Pass run(NetworkImpl& net, const torch::Tensor& x, const torch::Tensor& upstream) {
  net.zero_grad();
  torch::Tensor in = x.detach().clone().requires_grad_(true);
  torch::manual_seed(7);  // the same dropout masks in both passes
  Pass p;
  const std::vector<torch::Tensor> outputs = forward_counting_cats(net, in, &p.cats);  // deep heads too
  torch::Tensor loss = (outputs[0] * upstream).sum();
  for (size_t i = 1; i < outputs.size(); ++i) loss = loss + outputs[i].square().sum();
  loss.backward();
  p.out = outputs[0].detach();
  p.input_grad = in.grad();
  for (const auto& kv : net.named_parameters()) {
    const torch::Tensor& g = kv.value().grad();
    p.grads[kv.key()] = g.defined() ? g.clone() : g;
  }
  return p;
}

std::vector<std::string> state_keys(torch::nn::Module& net) {
  std::vector<std::string> keys;
  for (const auto& kv : net.named_parameters()) keys.push_back(kv.key());
  for (const auto& kv : net.named_buffers()) keys.push_back(kv.key());
  return keys;
}

// Built from one seed, run with set_split_concat false and then true: the same state keys, the same
// output and the same gradients within float32 rounding (1e-4 of each tensor's largest value).
template <class Impl>
void expect_switch_keeps_the_network(const ModelConfig& cfg, int64_t in_channels, const Shape3& size,
                                     int64_t decoder_cats, bool channels_last = false) {
  torch::manual_seed(11);
  Network net = build_network(cfg, in_channels, /*out_channels=*/3);
  auto* impl = dynamic_cast<Impl*>(net.get());
  ASSERT_NE(impl, nullptr);
  torch::Tensor x = torch::randn({2, in_channels, size[0], size[1], size[2]});
  if (channels_last) {
    to_channels_last(*net);
    x = x.contiguous(at::MemoryFormat::ChannelsLast3d);
  }
  const torch::Tensor upstream = torch::randn({2, 3, size[0], size[1], size[2]});
  net->train();
  const Pass off = run(*net, x, upstream);
  const std::vector<std::string> keys = state_keys(*net);
  impl->set_split_concat(true);
  const Pass on = run(*net, x, upstream);
  EXPECT_EQ(state_keys(*net), keys);
  EXPECT_EQ(off.cats - on.cats, decoder_cats);  // the switch takes the path without the concatenations
  expect_near(on.out, off.out, 1e-4, "output");
  expect_near(on.input_grad, off.input_grad, 1e-4, "gradient of the input");
  // A bias followed by a norm has a zero gradient in exact arithmetic: what float32 gives is the
  // rounding of a sum that cancels, so each gradient is held to 1e-4 of its own largest value or of
  // 1e-2 of the network's largest gradient, whichever is larger.
  double largest = 0;
  for (const auto& kv : off.grads) largest = std::max(largest, kv.second.abs().max().item<double>());
  for (const auto& [name, grad] : off.grads) {
    expect_near(on.grads.at(name), grad, 1e-4, "gradient of " + name, 1e-2 * largest);
  }
  if (channels_last) {
    EXPECT_EQ(on.out.is_contiguous(at::MemoryFormat::ChannelsLast3d),
              off.out.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  }
  // Off again: the concatenation, the first pass to the bit.
  impl->set_split_concat(false);
  EXPECT_TRUE(torch::equal(run(*net, x, upstream).out, off.out));
}

ModelConfig unet(Architecture arch, Norm norm) {
  ModelConfig m = test::unet_config(/*levels=*/3, /*base_filters=*/3);  // odd channel counts
  m.architecture = arch;
  m.norm = norm;
  if (arch == Architecture::kResEncUNet) m.blocks_per_level = {1, 2, 1};
  return m;
}

// Plain (instance norm; batch norm with deep supervision and 3 blocks a stage), residual encoder,
// 2D, channels-last; with activation checkpointing of the decoder (run_checkpointed takes one
// input), the concatenations stay.
TEST(SplitConcat, UNetsComputeTheSame) {
  ModelConfig batch = unet(Architecture::kUNet, Norm::kBatch);
  batch.deep_supervision = true;
  batch.convs_per_level = 3;
  ModelConfig flat = unet(Architecture::kUNet, Norm::kInstance);
  flat.dims = 2;
  flat.slice_axis = 0;
  ModelConfig checkpointed = unet(Architecture::kUNet, Norm::kInstance);
  checkpointed.activation_checkpointing = Checkpointing::kAll;
  struct Case {
    std::string name;
    ModelConfig cfg;
    Shape3 size;
    int64_t decoder_cats;
    bool channels_last;
  };
  const std::vector<Case> cases = {
      {"plain", unet(Architecture::kUNet, Norm::kInstance), {8, 8, 8}, 2, false},
      {"batch norm, deep supervision", batch, {8, 4, 8}, 2, false},
      {"residual encoder", unet(Architecture::kResEncUNet, Norm::kInstance), {8, 8, 8}, 2, false},
      {"2D", flat, {1, 8, 8}, 2, false},
      {"channels-last", unet(Architecture::kUNet, Norm::kInstance), {8, 8, 8}, 2, true},
      {"checkpointed decoder", checkpointed, {8, 8, 8}, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_switch_keeps_the_network<UNet3dImpl>(c.cfg, /*in_channels=*/2, c.size, c.decoder_cats, c.channels_last);
  }
}

TEST(SplitConcat, MlperfUNet3dComputesTheSame) {
  ModelConfig m;
  m.architecture = Architecture::kMlperfUNet3d;
  m.levels = 3;
  m.base_filters = 3;
  m.norm = Norm::kInstance;
  m.activation = Activation::kRelu;
  expect_switch_keeps_the_network<MlperfUNet3dImpl>(m, 1, {8, 8, 8}, /*decoder_cats=*/2);
}

TEST(SplitConcat, OpenKbpBaselineComputesTheSame) {
  ModelConfig m;
  m.architecture = Architecture::kOpenKbpBaseline;
  m.base_filters = 2;
  expect_switch_keeps_the_network<OpenKbpBaselineImpl>(m, 3, {64, 64, 64}, /*decoder_cats=*/5);
}

}  // namespace
}  // namespace u3d
