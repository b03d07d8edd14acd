// Layout conversions inside a channels-last training step (issue 33): for each network with
// instance or group norm, one TrainStep (forward, Dice + cross-entropy, backward, SGD) on the CPU
// with model.channels_last on, watched by a RecordFunction observer (the profiler's hook) on every
// thread. Every aten::copy_ of at least the size of the network's smallest activation is recorded
// with the ops it runs under (the threshold is above every weight, so weight-sized copies, such as
// the CPU's fused SGD making channels-last weights contiguous, are not counted); the network itself
// (its forward ops and their autograd nodes) must make none. What remains is listed in expected()
// with the reason: the loss's.
#include <ATen/record_function.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <mutex>

#include "batches.h"
#include "u3d/model/unet.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

struct Copy {
  int64_t numel;
  std::string context;                   // the enclosing ops, outermost first
  bool source_is_channel_slice = false;  // NDHWC strides of a wider tensor (C stride 1, dense otherwise not)
  bool source_is_ncdhw = false;          // a contiguous (NCDHW) source of more than one channel
};

thread_local std::vector<std::string> op_stack;
std::mutex copies_mutex;
std::vector<Copy>* copies_sink = nullptr;
int64_t copies_threshold = 0;

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  op_stack.emplace_back(fn.name());
  if (std::string_view(fn.name()) != "aten::copy_") return nullptr;
  const auto inputs = fn.inputs();
  if (inputs.empty() || !inputs[0].isTensor()) return nullptr;
  const int64_t n = inputs[0].toTensor().numel();
  if (n < copies_threshold) return nullptr;
  std::string context;
  for (const auto& name : op_stack) context += (context.empty() ? "" : " > ") + name;
  bool slice = false, ncdhw = false;
  if (inputs.size() > 1 && inputs[1].isTensor()) {  // the source's shape and strides
    const auto& src = inputs[1].toTensor();
    slice = src.dim() == 5 && src.stride(1) == 1 && src.stride(4) > src.size(1);
    ncdhw = src.dim() == 5 && src.size(1) > 1 && src.is_contiguous();
    context += fmt::format(" [{} strides {} -> {}]", fmt::join(src.sizes(), "x"), fmt::join(src.strides(), ","),
                           fmt::join(inputs[0].toTensor().strides(), ","));
  }
  std::lock_guard<std::mutex> lock(copies_mutex);
  if (copies_sink) copies_sink->push_back({n, context, slice, ncdhw});
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (!op_stack.empty()) op_stack.pop_back();
}

// Copies of at least `threshold` elements made while `run` runs.
std::vector<Copy> copies_during(int64_t threshold, const std::function<void()>& run) {
  std::vector<Copy> copies;
  copies_sink = &copies;
  copies_threshold = threshold;
  const auto handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_enter, &on_exit).needsInputs(true));
  run();
  at::removeCallback(handle);
  copies_sink = nullptr;
  return copies;
}

// The copies a channels-last step still makes, none of them the norms' (the reason is printed):
// - the loss: the float32 one-hot target (aten::to), softmax / log-softmax over the class axis of
//   the logits, forward and backward, which take contiguous inputs on the CPU, and so the logits'
//   gradient arrives NCDHW at the head convolution, whose backward converts it once;
// - the decoder's skip concatenation: its backward hands each input a channel slice of the NDHWC
//   gradient (not dense; in NCDHW a channel slice is), which the convolution's backward makes dense:
//   one per decoder stage, the size of the up-convolution's output;
// - resenc_unet's avg_pool3d (the strided skip path), whose CPU kernel is NCDHW only, and the
//   projection convolution after it (issue 40 replaces it with a reshape and mean).
std::string expected(const Copy& c, int64_t logits_numel) {
  const auto starts = [&](const char* op) { return c.context.rfind(op, 0) == 0; };
  for (const char* op : {"aten::to", "aten::softmax", "aten::cross_entropy_loss", "aten::log_softmax",
                         "autograd::engine::evaluate_function: SoftmaxBackward0"}) {
    if (starts(op) && c.numel <= logits_numel) return "loss";
  }
  const bool conv_backward = starts("autograd::engine::evaluate_function: ConvolutionBackward0");
  if (conv_backward && c.numel == logits_numel) return "loss gradient into the head convolution";
  if (conv_backward && c.source_is_channel_slice) return "skip concatenation's gradient slice";
  if (c.context.find("avg_pool3d") != std::string::npos || starts("aten::conv3d")) return "avg_pool3d";
  if (conv_backward && c.source_is_ncdhw) return "avg_pool3d's NCDHW output in the projection's backward";
  return "";
}

struct Case {
  std::string name;
  std::function<void(ModelConfig&)> set;
  int64_t smallest_activation;  // batch 2, 32^3 patch: N * filters * voxels at the deepest level
};

TEST(LayoutCopies, ChannelsLastStepsOfInstanceAndGroupNormNetworksCopyNoActivation) {
  const std::vector<Case> cases = {
      {"nnunet_like (unet, instance norm, deep supervision)",
       [](ModelConfig& m) {
         m.levels = 3;
         m.deep_supervision = true;
       },
       2 * 16 * 8 * 8 * 8},
      {"resenc_unet",
       [](ModelConfig& m) {
         m.architecture = Architecture::kResEncUNet;
         m.levels = 3;
         m.blocks_per_level = {1, 2, 2};
         m.convs_per_level = 1;
         m.deep_supervision = true;
       },
       2 * 16 * 8 * 8 * 8},
      {"unet, group norm",
       [](ModelConfig& m) {
         m.levels = 3;
         m.norm = Norm::kGroup;
         m.norm_groups = 2;
       },
       2 * 16 * 8 * 8 * 8},
      {"mlperf_unet3d",
       [](ModelConfig& m) {
         m.architecture = Architecture::kMlperfUNet3d;
         m.levels = 3;
         m.activation = Activation::kRelu;
       },
       2 * 16 * 8 * 8 * 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Config cfg = test::step_config(Precision::kFp32, Toggle::kOn);
    c.set(cfg.model);
    cfg.training.optimizer = OptimizerKind::kSgd;
    torch::manual_seed(1);
    Network net = build_network(cfg.model, 1, 3);
    ASSERT_TRUE(resolve_channels_last(cfg.model, torch::kCPU));
    to_channels_last(*net);
    const Loss loss(LossKind::kDiceCe);
    Optimizer opt(cfg.training, net->parameters());
    opt.set_lr(1e-3);
    TrainStep step(cfg, torch::kCPU, *net, loss, opt, /*monitor=*/nullptr);
    Batch batch;
    batch.image = torch::randn({2, 1, 32, 32, 32});
    batch.target = torch::randint(0, 3, {2, 32, 32, 32}, torch::kLong);
    (void)step.run(batch);  // the first step makes the optimizer's state
    const auto copies = copies_during(c.smallest_activation, [&] { (void)step.run(batch).item<float>(); });
    int unexpected = 0, slices = 0;
    for (const Copy& copy : copies) {
      const std::string why = expected(copy, /*logits_numel=*/2 * 3 * 32 * 32 * 32);
      unexpected += why.empty() ? 1 : 0;
      slices += why == "skip concatenation's gradient slice" ? 1 : 0;
      EXPECT_EQ(copy.context.find("norm"), std::string::npos) << "a norm converted the layout: " << copy.context;
      std::cout << "  " << c.name << ": copy of " << copy.numel << " elements under " << copy.context << ": "
                << (why.empty() ? "UNEXPECTED" : why) << "\n";
    }
    EXPECT_LE(slices, cfg.model.levels - 1) << "at most one per decoder stage";
    EXPECT_EQ(unexpected, 0) << "activation-size layout copies inside the step";
  }
}

}  // namespace
}  // namespace u3d
