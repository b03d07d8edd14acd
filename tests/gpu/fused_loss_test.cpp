// The fused loss kernels (kernels/fused_loss.h) on CUDA through u3d::Loss, with the kernels enabled
// against disabled (the ATen composition of train/losses.h): Dice + cross-entropy on a softmax head
// and BCE + Dice on a sigmoid head, named and as weighted lists in either order, in float32, bfloat16
// and float16, 3-D and 2-D, channels-last and contiguous, odd sizes, batch 1, class counts that are
// not a multiple of 8 (each register width of the kernels): the value, the per-term parts and the
// logits' gradient; deep supervision; captured with the backward in a CUDA graph and replayed on new
// values; bitwise equal run to run; captured bf16 training steps of a deep-supervised U-Net on each
// head with model.fused_kernels on against off. A test that finds no CUDA device skips; one that
// finds a build without the kernels, or a loss that did not take them, fails.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <functional>
#include <set>

#include "devices.h"
#include "graph_capture.h"
#include "tensor_compare.h"
#include "u3d/core/run.h"
#include "u3d/kernels/fused_loss.h"
#include "u3d/kernels/fused_norm_act.h"
#include "u3d/model/fused_kernels.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

using test::kCuda;

#define U3D_REQUIRE_LOSS_KERNELS()                                    \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"; \
  ASSERT_TRUE(kernels::built()) << "this build has no CUDA kernels (kernels/)"

// Whether the autograd graph of `t` holds the fused kernels' node (the loss took them).
bool took_kernels(const torch::Tensor& t) {
  std::set<const torch::autograd::Node*> seen;
  std::function<bool(const std::shared_ptr<torch::autograd::Node>&)> visit =
      [&](const std::shared_ptr<torch::autograd::Node>& node) {
        if (!node || !seen.insert(node.get()).second) return false;
        if (node->name().find("FusedLossFunction") != std::string::npos) return true;
        for (const auto& edge : node->next_edges()) {
          if (visit(edge.function)) return true;
        }
        return false;
      };
  return visit(t.grad_fn());
}

struct LossRun {
  torch::Tensor total, terms, dx;
};

// loss.parts on a copy of x (its layout and dtype) with the kernels `on`; the loss's backward.
LossRun run_loss(const Loss& loss, const torch::Tensor& x, const torch::Tensor& labels, bool on) {
  FusedKernelsScope scope(on);
  torch::Tensor xx = x.detach().clone().requires_grad_();
  const LossParts p = loss.parts(xx, labels, torch::Tensor());
  EXPECT_EQ(took_kernels(p.total), on) << "the loss " << (on ? "did not take" : "took") << " the fused kernels";
  p.total.backward();
  return {p.total.detach(), p.terms, xx.grad()};
}

// Logits (N, C, spatial...) of `dtype` in channels-last (or contiguous) memory and their labels.
std::pair<torch::Tensor, torch::Tensor> inputs(const std::vector<int64_t>& shape, torch::ScalarType dtype,
                                               bool channels_last, bool sigmoid, uint64_t seed) {
  torch::manual_seed(seed);
  const auto opts = torch::TensorOptions().device(kCuda);
  torch::Tensor x = (torch::randn(shape, opts) * 2).to(dtype);
  const auto cl = shape.size() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
  x = x.contiguous(channels_last ? cl : at::MemoryFormat::Contiguous);
  std::vector<int64_t> label_shape = {shape[0]};
  label_shape.insert(label_shape.end(), shape.begin() + 2, shape.end());
  const int64_t classes = sigmoid ? shape[1] + 1 : shape[1];
  return {x, torch::randint(/*high=*/classes, label_shape, opts.dtype(torch::kLong))};
}

LossSpec list(const std::string& a, double wa, const std::string& b, double wb) {
  LossSpec s;
  s.terms = {LossTerm{a, wa}, LossTerm{b, wb}};
  return s;
}

Loss softmax_loss(const LossSpec& spec) { return Loss(spec, LossOptions{}); }
Loss sigmoid_loss(const LossSpec& spec) {
  LossOptions o;
  o.sigmoid = true;
  return Loss(spec, o);
}

struct LossCase {
  std::vector<int64_t> shape;  // logits
  bool sigmoid;
  bool channels_last;
};

TEST(FusedLoss, EqualsAtenForBothHeadsEveryDtypeAndShape) {
  U3D_REQUIRE_LOSS_KERNELS();
  const std::vector<LossCase> cases = {
      {{2, 3, 9, 7, 5}, false, true},  {{1, 5, 6, 5, 7}, false, true},   // the 4-wide kernels; batch 1, 16-wide
      {{2, 13, 4, 6, 5}, false, true}, {{1, 40, 3, 5, 4}, false, true},  // the 16-wide and the 64-wide kernels
      {{2, 25, 3, 4, 5}, false, true}, {{1, 20, 5, 3, 4}, true, true},   // the 32-wide kernels, both heads
      {{2, 2, 33, 17}, false, true},                                     // 2-D, ChannelsLast
      {{2, 4, 1, 15, 9}, false, true},                                   // a slice as (N, C, 1, H, W)
      {{2, 3, 9, 7, 5}, false, false},                                   // contiguous NCDHW
      {{2, 1, 9, 7, 5}, true, true},   {{1, 3, 6, 5, 7}, true, true},   {{2, 7, 4, 6, 5}, true, true},
      {{2, 3, 21, 11}, true, true},    {{2, 3, 9, 7, 5}, true, false},
  };
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const double tol = dtype == torch::kFloat ? 1e-4 : 2e-2;  // dx is rounded to the logits' dtype
    for (const LossCase& k : cases) {
      SCOPED_TRACE(::testing::Message() << c10::toString(dtype) << (k.sigmoid ? " sigmoid " : " softmax ")
                                        << (k.channels_last ? "channels-last " : "contiguous ") << "shape "
                                        << c10::IntArrayRef(k.shape));
      const auto [x, labels] = inputs(k.shape, dtype, k.channels_last, k.sigmoid, /*seed=*/31);
      ASSERT_TRUE(kernels::loss_applies(x, labels, k.sigmoid ? Head::kSigmoid : Head::kSoftmax));
      std::vector<Loss> losses;
      if (k.sigmoid) {
        losses = {sigmoid_loss(list("bce", 1.0, "dice", 1.0)), sigmoid_loss(list("dice", 1.7, "bce", 0.4))};
      } else {
        losses = {softmax_loss(LossKind::kDiceCe), softmax_loss(list("dice", 0.6, "ce", 1.4))};
      }
      for (const Loss& loss : losses) {
        const LossRun off = run_loss(loss, x, labels, /*on=*/false), on = run_loss(loss, x, labels, /*on=*/true);
        EXPECT_LT(test::rel_diff(on.total, off.total), 1e-4);
        EXPECT_LT(test::rel_diff(on.dx, off.dx), tol);
        EXPECT_EQ(on.dx.scalar_type(), dtype);
        EXPECT_EQ(on.dx.strides(), x.strides());
        ASSERT_EQ(on.terms.defined(), off.terms.defined());
        if (off.terms.defined()) EXPECT_LT(test::rel_diff(on.terms, off.terms), 1e-4);
      }
    }
  }
}

TEST(FusedLoss, KernelsApplyOnlyToWhatTheyTake) {
  U3D_REQUIRE_LOSS_KERNELS();
  const auto [x, labels] =
      inputs({2, 3, 4, 5, 6}, torch::kBFloat16, /*channels_last=*/true, /*sigmoid=*/false, /*seed=*/1);
  EXPECT_TRUE(kernels::loss_applies(x, labels, Head::kSoftmax));
  EXPECT_FALSE(kernels::loss_applies(x.to(torch::kDouble), labels, Head::kSoftmax));
  EXPECT_FALSE(kernels::loss_applies(x, labels.to(torch::kInt), Head::kSoftmax));
  EXPECT_FALSE(kernels::loss_applies(x, labels.narrow(1, 0, 3), Head::kSoftmax));
  EXPECT_FALSE(kernels::loss_applies(x.narrow(1, 0, 1), labels, Head::kSoftmax));  // one class
  EXPECT_TRUE(kernels::loss_applies(x.narrow(1, 0, 1).contiguous(), labels, Head::kSigmoid));
  EXPECT_FALSE(kernels::loss_applies(x.transpose(2, 4), labels.transpose(1, 3), Head::kSoftmax));
  const auto [wide, wide_labels] =
      inputs({1, 65, 2, 2, 2}, torch::kFloat, /*channels_last=*/true, /*sigmoid=*/false, /*seed=*/1);
  EXPECT_FALSE(kernels::loss_applies(wide, wide_labels, Head::kSoftmax));
  // An ignore label or class weights keep ATen.
  FusedKernelsScope scope(/*on=*/true);
  LossOptions ignore;
  ignore.ignore_label = 2;
  EXPECT_FALSE(took_kernels(Loss(LossKind::kDiceCe, ignore)(x.clone().requires_grad_(), labels, torch::Tensor())));
  LossOptions weighted;
  weighted.class_weights = {1.0, 2.0, 3.0};
  EXPECT_FALSE(took_kernels(Loss(LossKind::kDiceCe, weighted)(x.clone().requires_grad_(), labels, torch::Tensor())));
}

TEST(FusedLoss, DeepSupervisionWithTheKernelsFollowsWithout) {
  U3D_REQUIRE_LOSS_KERNELS();
  for (bool sigmoid : {false, true}) {
    const Loss loss = sigmoid ? sigmoid_loss(list("bce", 1.0, "dice", 1.0)) : softmax_loss(LossKind::kDiceCe);
    const int64_t c = sigmoid ? 3 : 4;
    torch::manual_seed(41);
    const auto opts = torch::TensorOptions().device(kCuda);
    const torch::Tensor labels = torch::randint(/*high=*/4, {2, 16, 24, 20}, opts.dtype(torch::kLong));
    std::vector<torch::Tensor> outs;
    for (int64_t f : {1, 2, 4}) {
      outs.push_back(torch::randn({2, c, 16 / f, 24 / f, 20 / f}, opts)
                         .to(torch::kBFloat16)
                         .contiguous(at::MemoryFormat::ChannelsLast3d));
    }
    const std::vector<double> weights = deep_supervision_weights(3);
    std::vector<torch::Tensor> totals, grads;
    for (bool on : {false, true}) {
      FusedKernelsScope scope(on);
      std::vector<torch::Tensor> leaves;
      for (const auto& o : outs) leaves.push_back(o.clone().requires_grad_());
      const LossParts p = deep_supervision_parts(loss, leaves, labels, weights);
      EXPECT_EQ(took_kernels(p.total), on);
      p.total.backward();
      totals.push_back(p.total.detach());
      for (size_t i = 0; i + 1 < leaves.size(); ++i) grads.push_back(leaves[i].grad());  // the last has weight 0
    }
    EXPECT_LT(test::rel_diff(totals[1], totals[0]), 1e-4) << (sigmoid ? "sigmoid" : "softmax");
    for (size_t i = 0; i < grads.size() / 2; ++i) {
      EXPECT_LT(test::rel_diff(grads[grads.size() / 2 + i], grads[i]), 2e-2)
          << (sigmoid ? "sigmoid" : "softmax") << " output " << i;
    }
  }
}

TEST(FusedLoss, RunsAreBitwiseEqual) {
  U3D_REQUIRE_LOSS_KERNELS();
  for (bool sigmoid : {false, true}) {
    const auto [x, labels] = inputs({2, 5, 32, 24, 40}, torch::kBFloat16, /*channels_last=*/true, sigmoid, /*seed=*/42);
    const Loss loss = sigmoid ? sigmoid_loss(list("bce", 1.0, "dice", 1.0)) : softmax_loss(LossKind::kDiceCe);
    const LossRun a = run_loss(loss, x, labels, /*on=*/true), b = run_loss(loss, x, labels, /*on=*/true);
    EXPECT_TRUE(torch::equal(a.total, b.total) && torch::equal(a.dx, b.dx)) << (sigmoid ? "sigmoid" : "softmax");
  }
}

TEST(FusedLoss, CapturedWithItsBackwardReplaysOnNewValues) {
  U3D_REQUIRE_LOSS_KERNELS();
  const auto opts = torch::TensorOptions().device(kCuda);
  for (bool sigmoid : {false, true}) {
    SCOPED_TRACE(sigmoid ? "sigmoid" : "softmax");
    const auto made = inputs({2, 5, 8, 12, 10}, torch::kHalf, /*channels_last=*/true, sigmoid, /*seed=*/43);
    torch::Tensor x = made.first.clone().requires_grad_(), labels = made.second;
    const Loss loss =
        sigmoid ? sigmoid_loss(list("bce", 0.5, "dice", 2.0)) : softmax_loss(list("ce", 1.0, "dice", 1.0));
    FusedKernelsScope scope(/*on=*/true);
    auto step = [&] {
      const LossParts p = loss.parts(x, labels, torch::Tensor());
      EXPECT_TRUE(took_kernels(p.total));
      p.total.backward();
      return p.total.detach();
    };
    at::cuda::CUDAGraph graph;
    const torch::Tensor total_static = test::capture_after_warm_up(graph, step, {&x});
    {
      torch::NoGradGuard no_grad;  // new values in the captured inputs
      x.copy_(torch::randn(x.sizes(), opts) * 3);
      labels.copy_(torch::randint(/*high=*/sigmoid ? 6 : 5, labels.sizes(), opts.dtype(torch::kLong)));
    }
    const test::ReplayAndEager r = test::replay_then_eager(graph, total_static, step, x);
    EXPECT_TRUE(torch::equal(r.replayed, r.eager));
    EXPECT_TRUE(torch::equal(r.replayed_grad, r.eager_grad));
    EXPECT_LT(test::rel_diff(r.eager, run_loss(loss, x.detach(), labels, /*on=*/false).total), 1e-4);  // new values
  }
}

// Losses of 8 training steps (from the third on replayed from a CUDA graph) of a deep-supervised
// segmentation U-Net in bf16 with the head's auto loss (softmax: dice_ce; sigmoid: [bce, dice]) and
// model.fused_kernels `toggle`.
std::vector<float> segmentation_losses(Head head, Toggle toggle) {
  Config cfg;
  cfg.data.path = "unused.h5";
  cfg.model.levels = 3;
  cfg.model.base_filters = 8;
  cfg.model.deep_supervision = true;
  cfg.model.head = head;
  cfg.model.fused_kernels = toggle;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = Precision::kBf16;
  cfg.training.lr = 1e-3;
  cfg.training.cuda_graph = Toggle::kOn;
  cfg.training.graph_warmup_steps = 2;
  init_cuda_allocator();
  torch::manual_seed(7);
  const int64_t classes = 4;
  Network net = build_network(cfg.model, 1, head == Head::kSigmoid ? classes - 1 : classes);
  net->to(kCuda);
  to_channels_last(*net);
  LossOptions options;
  options.sigmoid = head == Head::kSigmoid;
  const Loss loss(resolve_loss(LossSpec(LossKind::kAuto), Task::kSegmentation, /*has_mask=*/false, head), options);
  Optimizer opt(cfg.training, net->parameters());
  opt.set_lr(cfg.training.lr);
  TrainStep step(cfg, kCuda, *net, loss, opt, nullptr);
  EXPECT_EQ(step.features().fused_kernels, toggle == Toggle::kOn);
  std::vector<float> losses;
  for (int64_t i = 0; i < 8; ++i) {
    torch::manual_seed(60 + static_cast<uint64_t>(i));
    Batch b;
    b.image = torch::randn({2, 1, 32, 32, 32}).to(kCuda);
    b.target = torch::randint(0, classes, {2, 32, 32, 32}, torch::kLong).to(kCuda);
    losses.push_back(step.run(b).item<float>());
  }
  EXPECT_TRUE(step.replayed());
  return losses;
}

TEST(FusedLoss, CapturedSegmentationStepsFollowTheUnfusedOnes) {
  U3D_REQUIRE_LOSS_KERNELS();
  for (Head head : {Head::kSoftmax, Head::kSigmoid}) {
    const std::vector<float> off = segmentation_losses(head, Toggle::kOff);
    const std::vector<float> on = segmentation_losses(head, Toggle::kOn);
    ASSERT_EQ(on.size(), off.size());
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_NEAR(on[i], off[i], 3e-2 * std::abs(off[i]) + 1e-4)
          << (head == Head::kSigmoid ? "sigmoid" : "softmax") << " step " << i;
    }
  }
}

}  // namespace
}  // namespace u3d
