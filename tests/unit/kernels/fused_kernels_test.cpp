// The kernels/ room on a machine without a GPU: the CUDA kernels are compiled into the library when
// the build found nvcc (U3D_TEST_EXPECT_CUDA_KERNELS, from CMake), for sm_80, sm_90 and sm_100 plus
// PTX; model.fused_kernels resolves to off on the CPU (auto) or refuses (on); and with the kernels
// enabled the CPU path is ATen's, bit for bit, for every norm and network and for the losses the
// fused loss kernels take on CUDA (kernels/fused_loss.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "fixtures.h"
#include "u3d/core/errors.h"
#include "u3d/kernels/fused_loss.h"
#include "u3d/kernels/fused_norm_act.h"
#include "u3d/model/fused_kernels.h"
#include "u3d/model/layout.h"
#include "u3d/model/unet.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

TEST(FusedKernelsBuild, TheCudaKernelsAreInTheLibraryForEveryTargetArchitecture) {
#if U3D_TEST_EXPECT_CUDA_KERNELS
  ASSERT_TRUE(kernels::built()) << "CMake compiled src/kernels/*.cu, but the library says it has no kernels";
  const std::string archs = kernels::architectures();
  for (const char* arch : {"sm_80", "sm_90", "sm_100", "PTX"}) {
    EXPECT_NE(archs.find(arch), std::string::npos) << arch << " missing from '" << archs << "'";
  }
#else
  EXPECT_FALSE(kernels::built()) << "this build configured no CUDA kernels";
  EXPECT_EQ(kernels::architectures(), "");
#endif
}

TEST(FusedKernelsBuild, AutoIsOffOnTheCpuAndOnIsRefused) {
  ModelConfig cfg;
  const torch::Device cpu(torch::kCPU);
  cfg.fused_kernels = Toggle::kAuto;
  FusedKernelsChoice choice = resolve_fused_kernels(cfg, cpu);
  EXPECT_FALSE(choice.on());
  EXPECT_EQ(choice.families, kernels::kNoFamilies);
  EXPECT_EQ(choice.reason, "auto: off on CPU");
  cfg.fused_kernels = Toggle::kOff;
  EXPECT_FALSE(resolve_fused_kernels(cfg, cpu).on());
  cfg.fused_kernels = Toggle::kOn;
  try {
    resolve_fused_kernels(cfg, cpu);
    FAIL() << "model.fused_kernels: on was taken on the CPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.fused_kernels: on needs a CUDA device"), std::string::npos) << e.what();
  }
}

TEST(FusedKernelsBuild, KernelsTakeNoCpuTensorAndRefuseOneInOneLine) {
  const torch::Tensor x = torch::randn({2, 8, 4, 4, 4}).contiguous(at::MemoryFormat::ChannelsLast3d);
  const torch::Tensor w = torch::ones({8}), b = torch::zeros({8});
  EXPECT_FALSE(kernels::applies(x, w, b));
  FusedKernelsScope on(/*on=*/true);
  EXPECT_TRUE(kernels::enabled(kernels::Family::kGroupNorm));
  try {
    kernels::group_norm_act(x, w, b, /*groups=*/8, 1e-5, kernels::FusedActivation::relu());
    FAIL() << "the CUDA kernels took a CPU tensor";
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("2x8x4x4x4"), std::string::npos) << e.what();
  }
}

TEST(FusedKernelsBuild, ScopeRestoresThePreviousSwitch) {
  EXPECT_EQ(kernels::enabled_families(), kernels::kNoFamilies);
  {
    FusedKernelsScope on(/*on=*/true);
    for (const kernels::Family f : kernels::all_families()) EXPECT_TRUE(kernels::enabled(f)) << kernels::family_name(f);
    {
      FusedKernelsScope off(/*on=*/false);
      EXPECT_EQ(kernels::enabled_families(), kernels::kNoFamilies);
    }
    EXPECT_EQ(kernels::enabled_families(), kernels::kAllFamilies);
  }
  EXPECT_EQ(kernels::enabled_families(), kernels::kNoFamilies);
}

// auto turns on a family at a time (the ones verified on that architecture), and a layer reads only
// its own family's switch.
TEST(FusedKernelsBuild, FamiliesSwitchOneAtATime) {
  EXPECT_EQ(kernels::all_families().size(), 4u);
  EXPECT_EQ(kernels::family_names(kernels::kAllFamilies), "batch_norm, group_norm, decoder_concat, loss");
  EXPECT_EQ(kernels::family_names(kernels::kNoFamilies), "none");
  {
    FusedKernelsScope some(kernels::bit(kernels::Family::kBatchNorm) | kernels::bit(kernels::Family::kLoss));
    EXPECT_TRUE(kernels::enabled(kernels::Family::kBatchNorm));
    EXPECT_FALSE(kernels::enabled(kernels::Family::kGroupNorm));
    EXPECT_FALSE(kernels::enabled(kernels::Family::kDecoderConcat));
    EXPECT_TRUE(kernels::enabled(kernels::Family::kLoss));
    EXPECT_EQ(kernels::family_names(kernels::enabled_families()), "batch_norm, loss");
  }
  // The verified table: a family is on for an architecture exactly when its list names it.
  for (const std::string arch : {"sm_80", "sm_90", "sm_100"}) {
    const kernels::Families on = verified_families(arch);
    for (const kernels::Family f : kernels::all_families()) {
      const auto& archs = verified_architectures(f);
      const bool listed = std::find(archs.begin(), archs.end(), arch) != archs.end();
      EXPECT_EQ((on & kernels::bit(f)) != 0, listed) << arch << " " << kernels::family_name(f);
    }
  }
}

// Forward and gradients of a channels-last network, on the CPU, with the kernels switched `on`.
std::vector<torch::Tensor> run_network(const ModelConfig& cfg, int64_t size, bool on) {
  FusedKernelsScope scope(on);
  torch::manual_seed(11);
  Network net = build_network(cfg, 2, 3);
  to_channels_last(*net);
  net->train();
  const torch::Tensor x = torch::randn({2, 2, size, size, size}).contiguous(at::MemoryFormat::ChannelsLast3d);
  const torch::Tensor y = net->forward(x);
  y.square().mean().backward();
  std::vector<torch::Tensor> out{y.detach()};
  for (const auto& p : net->parameters()) out.push_back(p.grad().clone());
  for (const auto& b : net->buffers()) out.push_back(b.clone());
  return out;
}

TEST(FusedKernelsBuild, EnabledKernelsLeaveTheCpuPathBitForBit) {
  std::vector<std::pair<ModelConfig, int64_t>> configs;  // network, input size
  for (Norm norm : {Norm::kBatch, Norm::kInstance, Norm::kGroup}) {
    ModelConfig m = test::unet_config(/*levels=*/2);
    m.norm = norm;
    m.norm_groups = 2;
    configs.emplace_back(m, 8);
  }
  ModelConfig kbp = test::unet_config(/*levels=*/2);
  kbp.architecture = Architecture::kOpenKbpBaseline;  // six stride-2 convolutions: 64 voxels a side
  kbp.base_filters = 1;
  configs.emplace_back(kbp, 64);
  for (const auto& [cfg, size] : configs) {
    const auto off = run_network(cfg, size, /*on=*/false), on = run_network(cfg, size, /*on=*/true);
    ASSERT_EQ(off.size(), on.size());
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_TRUE(torch::equal(off[i], on[i])) << to_string(cfg.architecture) << " " << to_string(cfg.norm)
                                               << ": tensor " << i << " differs with the kernels enabled on CPU";
    }
  }
}

TEST(FusedKernelsBuild, LossKernelsTakeNoCpuTensorAndTheCpuLossIsAtensBitForBit) {
  torch::manual_seed(12);
  const torch::Tensor x = torch::randn({2, 3, 5, 6, 7}).contiguous(at::MemoryFormat::ChannelsLast3d);
  const torch::Tensor labels = torch::randint(/*high=*/3, {2, 5, 6, 7}, torch::kLong);
  EXPECT_FALSE(kernels::loss_applies(x, labels, Head::kSoftmax));
  EXPECT_FALSE(kernels::loss_applies(x, labels, Head::kSigmoid));
  LossSpec weighted;
  weighted.terms = {LossTerm{"dice", 0.5}, LossTerm{"ce", 2.0}};
  LossSpec region;
  region.terms = {LossTerm{"bce", 1.0}, LossTerm{"dice", 1.0}};
  LossOptions sigmoid;
  sigmoid.sigmoid = true;
  const std::vector<Loss> losses = {Loss(LossKind::kDiceCe), Loss(weighted), Loss(region, sigmoid)};
  for (const Loss& loss : losses) {
    std::vector<torch::Tensor> got;
    for (bool on : {false, true}) {
      FusedKernelsScope scope(on);
      const torch::Tensor xx = x.clone().requires_grad_();
      const LossParts p = loss.parts(xx, labels, torch::Tensor());
      p.total.backward();
      got.push_back(p.total.detach());
      got.push_back(xx.grad());
      if (p.terms.defined()) got.push_back(p.terms);
    }
    ASSERT_EQ(got.size() % 2, 0u);
    for (size_t i = 0; i < got.size() / 2; ++i) {
      EXPECT_TRUE(torch::equal(got[i], got[got.size() / 2 + i])) << "tensor " << i << " differs with the kernels on";
    }
  }
  FusedKernelsScope on(/*on=*/true);
  try {
    kernels::softmax_ce_dice_sums(x, labels);
    FAIL() << "the CUDA loss kernels took a CPU tensor";
  } catch (const TrainingError& e) {
    EXPECT_NE(std::string(e.what()).find("2x3x5x6x7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace u3d
