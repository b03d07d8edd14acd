// Bigger models on the same memory (issue 19): the residual-encoder U-Net, activation
// checkpointing and gradient accumulation, on the CPU.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "batches.h"
#include "cpu_step.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/model/autocast.h"
#include "u3d/model/checkpointing.h"
#include "u3d/model/unet.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

ModelConfig resenc(int64_t levels, std::vector<int64_t> blocks) {
  ModelConfig m;
  m.architecture = Architecture::kResEncUNet;
  m.levels = levels;
  m.base_filters = 4;
  m.convs_per_level = 1;
  m.blocks_per_level = std::move(blocks);
  return m;
}

TEST(ResEncUNet, ParameterCountMatchesHandCount) {
  // levels 2, base 4, blocks [1, 2], 1 decoder conv, k3, instance norm (affine), conv bias, in 2, out 1:
  // stem   conv 2->4 (216 + 4) + norm (8)                                           228
  // enc0   block 4->4: conv1 (432 + 4) + norm (8), conv2 (432 + 4) + norm (8)       888
  // enc1   block 4->8 s2: conv1 (864 + 8) + norm (16), conv2 (1728 + 8) + norm (16),
  //        skip: avg pool, 1x1 conv 4->8 without bias (32) + norm (16)              2688
  //        block 8->8: 2 x (1728 + 8 + 16)                                          3504
  // up0    convT 8->4 k2 (256 + 4)                                                  260
  // dec0   conv 8->4 (864 + 4) + norm (8)                                           876
  // head   conv 4->1 k1 (4 + 1)                                                     5    = 8449
  auto net = build_network(resenc(2, {1, 2}), 2, 1);
  EXPECT_EQ(count_parameters(*net), 8449);
  const auto y = net->forward(torch::randn({2, 2, 8, 16, 8}));
  EXPECT_EQ(y.sizes(), (torch::IntArrayRef{2, 1, 8, 16, 8}));
  // The parameter names a checkpoint stores.
  std::vector<std::string> names;
  for (const auto& p : net->named_parameters()) names.push_back(p.key());
  for (const char* name : {"encoder0.0.conv.weight", "encoder0.1.conv2.norm.weight", "encoder1.0.project.conv.weight",
                           "encoder1.1.conv1.conv.bias", "up0.weight", "decoder0.0.conv.bias", "head.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(ResEncUNet, EachResidualBlockStartsAsItsSkipPath) {
  // nnU-Net's init_last_bn_before_add_to_0: conv2's norm starts at weight 0 and bias 0.
  ModelConfig m = resenc(2, {1, 1});
  ResidualBlock same(4, 4, /*stride=*/1, m);
  const auto x = torch::randn({1, 4, 8, 8, 8});
  EXPECT_TRUE(torch::equal(same->forward(x), torch::leaky_relu(x, m.negative_slope)));
  ResidualBlock down(4, 8, /*stride=*/2, m);
  const auto y = down->forward(x);
  EXPECT_EQ(y.sizes(), (torch::IntArrayRef{1, 8, 4, 4, 4}));
  for (const auto& p : down->named_parameters()) {
    if (p.key().rfind("conv2.norm.", 0) == 0) EXPECT_EQ(p.value().abs().max().item<float>(), 0.0f) << p.key();
  }
}

TEST(ResEncUNet, PresetsFillOnlyTheKeysTheConfigLeavesUnset) {
  const Config l = load_config_from_string(
      "data: {path: d.h5, patch_size: [128, 128, 128]}\nmodel: {preset: resenc_l, base_filters: 24}\n", "exp.yaml");
  EXPECT_EQ(l.model.architecture, Architecture::kResEncUNet);
  EXPECT_EQ(l.model.levels, 6);         // 128 -> 4 voxels at the bottleneck
  EXPECT_EQ(l.model.base_filters, 24);  // set by the config: kept
  EXPECT_EQ(l.model.max_filters, 320);
  EXPECT_EQ(l.model.convs_per_level, 1);
  EXPECT_EQ(l.model.blocks_per_level, (std::vector<int64_t>{1, 3, 4, 6, 6, 6, 6, 6}));
  EXPECT_EQ(l.origin.at("model.levels"), "model.preset: resenc_l");
  // The written config loads back to the same values (a resume compares them).
  EXPECT_TRUE(diff(load_config_from_string(to_yaml(l), "saved"), l).empty());
  // nnU-Net's configuration built in PyTorch (scripts/bench/pytorch_step.py --arch resenc --params-only
  // --size 128 --levels 6 --convs-per-level 1 --in-channels 1 --out-channels 4) has 102,351,380 parameters; the
  // preset's network with deep supervision (nnU-Net always builds a head per decoder stage) has the same.
  ModelConfig preset =
      load_config_from_string(
          "data: {path: d.h5, patch_size: 128}\nmodel: {preset: resenc_l, deep_supervision: true}\n", "exp.yaml")
          .model;
  EXPECT_EQ(count_parameters(*build_network(preset, 1, 4)), 102351380);
  // The shipped recipe loads as the preset says.
  const Config recipe = load_config(test::source_dir() / "configs" / "segmentation_resenc.yaml");
  EXPECT_EQ(recipe.model.architecture, Architecture::kResEncUNet);
  EXPECT_EQ(recipe.model.levels, 6);
  EXPECT_EQ(recipe.model.convs_per_level, 1);
  EXPECT_TRUE(recipe.model.deep_supervision);
  // Levels follow the patch: 96 x 160 x 160 stops where 96 would drop below 4 voxels.
  const Config m = load_config_from_string(
      "data: {path: d.h5, patch_size: [96, 160, 160]}\nmodel: {preset: resenc_m}\n", "exp.yaml");
  EXPECT_EQ(m.model.levels, 5);
  // A list too short for the levels is one line naming the key.
  try {
    load_config_from_string(
        "data: {path: d.h5, patch_size: 32}\nmodel: {architecture: resenc_unet, levels: 3, "
        "blocks_per_level: [1, 2]}\n",
        "exp.yaml");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.blocks_per_level: 2 entries for model.levels = 3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_config_from_string("data: {path: d.h5, patch_size: 64}\nmodel: {architecture: openkbp_baseline, "
                                       "activation_checkpointing: all}\n",
                                       "exp.yaml"),
               ConfigError);
}

// Gradients of every parameter after forward_deep + backward of a fixed loss, and the buffers.
struct Grads {
  std::map<std::string, torch::Tensor> grads, buffers;
  torch::Tensor output;
};

Grads grads_of(ModelConfig m, Checkpointing mode, std::optional<at::ScalarType> autocast = std::nullopt) {
  m.activation_checkpointing = mode;
  torch::manual_seed(3);
  Network net = build_network(m, 2, 3);
  net->train();
  torch::manual_seed(11);
  const auto x = torch::randn({2, 2, 16, 16, 16});
  torch::Tensor loss;
  std::vector<torch::Tensor> outs;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(at::kCPU, *autocast);
    outs = net->forward_deep(x);
  }
  loss = torch::zeros({});
  for (size_t i = 0; i < outs.size(); ++i) loss = loss + (outs[i].to(torch::kFloat).pow(2)).mean() / (1.0 + i);
  loss.backward();
  Grads g;
  g.output = outs[0].detach().to(torch::kFloat);
  for (const auto& p : net->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient (" << to_string(mode) << ")";
    if (p.value().grad().defined()) g.grads[p.key()] = p.value().grad().clone();
  }
  for (const auto& b : net->named_buffers()) g.buffers[b.key()] = b.value().clone();
  return g;
}

void expect_identical(const Grads& plain, const Grads& ckpt, const std::string& what) {
  EXPECT_TRUE(torch::equal(plain.output, ckpt.output)) << what << ": output";
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size()) << what;
  for (const auto& [name, g] : plain.grads) EXPECT_TRUE(torch::equal(g, ckpt.grads.at(name))) << what << ": " << name;
  for (const auto& [name, b] : plain.buffers) {
    EXPECT_TRUE(torch::equal(b, ckpt.buffers.at(name))) << what << ": buffer " << name;
  }
}

TEST(ActivationCheckpointing, GradientsEqualThePlainNetworkBitwise) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  ModelConfig unet;
  unet.levels = 3;
  unet.base_filters = 4;
  unet.deep_supervision = true;
  ModelConfig res = resenc(3, {1, 2, 2});
  res.deep_supervision = true;
  for (const auto& [name, m] : std::vector<std::pair<std::string, ModelConfig>>{{"unet", unet}, {"resenc", res}}) {
    const Grads plain = grads_of(m, Checkpointing::kOff);
    for (const Checkpointing mode : {Checkpointing::kEncoder, Checkpointing::kAll}) {
      expect_identical(plain, grads_of(m, mode), name + " " + to_string(mode));
    }
    // Under bf16 autocast the recomputation casts as the forward did.
    expect_identical(grads_of(m, Checkpointing::kOff, at::kBFloat16), grads_of(m, Checkpointing::kAll, at::kBFloat16),
                     name + " bf16");
  }
  // Batch norm: the recomputation leaves the running statistics as one forward left them.
  ModelConfig bn = unet;
  bn.norm = Norm::kBatch;
  expect_identical(grads_of(bn, Checkpointing::kOff), grads_of(bn, Checkpointing::kAll), "batch norm");
  // Dropout: the recomputation draws the forward's masks.
  ModelConfig drop = unet;
  drop.dropout = 0.3;
  expect_identical(grads_of(drop, Checkpointing::kOff), grads_of(drop, Checkpointing::kAll), "dropout");
  at::globalContext().setDeterministicAlgorithms(false, /*warn_only=*/false);
}

// CheckpointFunction nodes in the autograd graph of `y`.
int64_t checkpoint_nodes(const torch::Tensor& y) {
  std::vector<torch::autograd::Node*> todo = {y.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int64_t n = 0;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (node->name().find("CheckpointFunction") != std::string::npos) ++n;
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return n;
}

TEST(ActivationCheckpointing, KeepsOnlyEachBlocksInputForBackward) {
  // A block of two convolutions: the plain graph keeps every intermediate activation, the
  // checkpointed one none of them (the autograd graph has one node for the whole block).
  auto stage = torch::nn::Sequential(torch::nn::Conv3d(torch::nn::Conv3dOptions(2, 4, 3).padding(1)),
                                     torch::nn::Functional([](torch::Tensor t) { return torch::relu(t); }),
                                     torch::nn::Conv3d(torch::nn::Conv3dOptions(4, 4, 3).padding(1)));
  const auto x = torch::randn({1, 2, 8, 8, 8});
  const auto plain = stage->forward(x);
  const auto ckpt = run_checkpointed(
      stage.ptr(), [stage](const torch::Tensor& t) mutable { return stage->forward(t); }, x,
      /*preserve_rng=*/false);
  EXPECT_TRUE(torch::equal(plain, ckpt));
  ASSERT_TRUE(ckpt.grad_fn());
  EXPECT_NE(ckpt.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << ckpt.grad_fn()->name();
  EXPECT_EQ(plain.grad_fn()->name(), "ConvolutionBackward0");
  // Outside training or without autograd the network runs its stages plainly.
  ModelConfig m = test::unet_config(2);
  m.activation_checkpointing = Checkpointing::kAll;
  Network net = build_network(m, 2, 1);
  net->eval();
  EXPECT_EQ(checkpoint_nodes(net->forward(x)), 0);
  net->train();
  EXPECT_EQ(checkpoint_nodes(net->forward(x)), 6);  // 2 ConvBlocks in each of 2 encoder stages and 1 decoder stage
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(net->forward(x).requires_grad());
  }
  m.activation_checkpointing = Checkpointing::kEncoder;
  EXPECT_EQ(checkpoint_nodes(build_network(m, 2, 1)->forward(x)), 4);
  // The residual encoder: the stem and each residual block.
  ModelConfig r = resenc(2, {1, 2});
  r.activation_checkpointing = Checkpointing::kEncoder;
  EXPECT_EQ(checkpoint_nodes(build_network(r, 2, 1)->forward(x)), 4);
}

// Trains a 2-level U-Net for `steps` optimizer steps on the halves of fixed batches of 2, fed as
// `micro` micro-batches of 2 / micro samples each; returns the parameters after.
std::map<std::string, torch::Tensor> train_accumulated(int64_t micro, int64_t steps, std::vector<float>* losses) {
  Config config = test::step_config(Precision::kFp32, Toggle::kOff);
  config.training.accumulate_steps = micro;
  config.training.grad_clip_norm = 1.0;
  // L1: a mean over voxels, so the micro-batches' means average to it exactly.
  test::CpuStep cpu_step(config, LossKind::kL1, /*monitored=*/true);
  auto& [cfg, net, loss, opt, monitor, step] = cpu_step;
  for (int64_t i = 0; i < steps; ++i) {
    const Batch whole = test::random_batch(100 + static_cast<uint64_t>(i));
    const int64_t n = 2 / micro;
    std::vector<int64_t> asked;
    const torch::Tensor l = step.run([&](int64_t m) {
      asked.push_back(m);
      Batch b;
      b.image = whole.image.narrow(0, m * n, n);
      b.target = whole.target.narrow(0, m * n, n);
      return b;
    });
    std::vector<int64_t> in_order(static_cast<size_t>(micro));
    std::iota(in_order.begin(), in_order.end(), 0);
    EXPECT_EQ(asked, in_order) << "each micro-batch asked once, in order";
    losses->push_back(l.item<float>());
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : net->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

TEST(GradientAccumulation, TwoMicroBatchesOfOneEqualOneBatchOfTwo) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  std::vector<float> whole_losses, micro_losses;
  const auto whole = train_accumulated(1, 3, &whole_losses);
  const auto micro = train_accumulated(2, 3, &micro_losses);
  for (size_t i = 0; i < whole_losses.size(); ++i) {
    EXPECT_NEAR(micro_losses[i], whole_losses[i], 1e-5 * std::abs(whole_losses[i])) << "step " << i;
  }
  for (const auto& [name, p] : whole) {
    EXPECT_TRUE(torch::allclose(micro.at(name), p, /*rtol=*/1e-5, /*atol=*/1e-6)) << name;
  }
  // The weights did move: the comparison is not between two untouched networks.
  torch::manual_seed(5);
  Network fresh = build_network(test::step_config(Precision::kFp32, Toggle::kOff).model, 2, 1);
  const std::string first = "encoder0.0.conv.weight";
  EXPECT_FALSE(torch::allclose(fresh->named_parameters()[first], whole.at(first)));
  at::globalContext().setDeterministicAlgorithms(false, /*warn_only=*/false);
}

TEST(GradientAccumulation, ANonFiniteMicroBatchSkipsTheWholeStep) {
  Config config = test::step_config(Precision::kFp32, Toggle::kOff);
  config.training.accumulate_steps = 3;
  test::CpuStep cpu_step(config, LossKind::kL1, /*monitored=*/true);
  auto& [cfg, net, loss, opt, monitor, step] = cpu_step;
  std::vector<torch::Tensor> before;
  for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
  step.run([](int64_t m) {
    Batch b = test::random_batch(7 + static_cast<uint64_t>(m));
    if (m == 2) plant_value(b.image, std::numeric_limits<float>::quiet_NaN());  // the last micro-batch only
    return b;
  });
  EXPECT_EQ(step.found_inf().item<float>(), 1.0f);
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
  EXPECT_EQ(monitor.totals().skipped, 1);  // one optimizer step skipped, not three micro-batches
  // run(batch) is for one micro-batch per step only.
  EXPECT_THROW(step.run(test::random_batch(1)), std::logic_error);
  EXPECT_NE(step.features().describe().find("3 micro-batches per step"), std::string::npos);
}

}  // namespace
}  // namespace u3d
