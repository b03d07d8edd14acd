// u3d::Optimizer against LibTorch's reference optimizers: the same updates (AdamW, Adam, SGD with
// and without Nesterov momentum), an Inf gradient skips exactly that step on the device, clipping
// equals torch::nn::utils::clip_grad_norm_, and the state round-trips through an archive.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/train/optimizer.h"

namespace u3d {
namespace {

// Two copies of the same parameters: one for u3d::Optimizer, one for the reference.
struct Pair {
  std::vector<torch::Tensor> ours, ref;
  explicit Pair(uint64_t seed) {
    torch::manual_seed(seed);
    for (auto shape : std::vector<std::vector<int64_t>>{{4, 3, 3, 3, 3}, {4}, {2, 4, 1, 1, 1}, {2}}) {
      const auto init = torch::randn(shape);
      ours.push_back(init.clone().requires_grad_(true));
      ref.push_back(init.clone().requires_grad_(true));
    }
  }
  // The same random gradients on both sides; `scale` makes them large or small.
  void set_grads(uint64_t seed, double scale = 1.0) {
    torch::manual_seed(seed);
    for (size_t i = 0; i < ours.size(); ++i) {
      const auto g = torch::randn(ours[i].sizes()) * scale;
      ours[i].mutable_grad() = g.clone();
      ref[i].mutable_grad() = g.clone();
    }
  }
};

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(a[i], b[i], /*rtol=*/1e-6, /*atol=*/1e-7))
        << what << " tensor " << i << " max |diff| " << diff;
  }
}

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone());
  return out;
}

torch::Tensor no_inf() { return torch::zeros({}, torch::kFloat); }

TrainingConfig config(OptimizerKind kind) {
  TrainingConfig c;
  c.optimizer = kind;
  c.lr = 0.01;
  c.weight_decay = 0.05;
  c.betas = {0.8, 0.95};
  c.momentum = 0.9;
  c.nesterov = true;
  return c;
}

// Runs `steps` updates with the same gradients through both optimizers, with a learning rate that
// changes every step (as the schedule does).
template <class RefOptimizer, class Options>
void compare(OptimizerKind kind, Options ref_options, int steps) {
  Pair p(1);
  Optimizer ours(config(kind), p.ours);
  RefOptimizer ref(p.ref, ref_options);
  for (int s = 0; s < steps; ++s) {
    const double lr = 0.01 * (1.0 + 0.1 * s);
    ours.set_lr(lr);
    for (auto& g : ref.param_groups()) g.options().set_lr(lr);
    p.set_grads(100 + static_cast<uint64_t>(s));
    ours.step(no_inf());
    ref.step();
    expect_close(p.ours, p.ref, fmt::format("{} step {}", to_string(kind), s + 1));
  }
  EXPECT_EQ(ours.steps_applied(), steps);
}

TEST(Optimizer, AdamWUpdatesEqualTorchAdamW) {
  compare<torch::optim::AdamW>(OptimizerKind::kAdamW,
                               torch::optim::AdamWOptions(0.01).betas({0.8, 0.95}).weight_decay(0.05).eps(1e-8), 6);
}

TEST(Optimizer, AdamUpdatesEqualTorchAdam) {
  compare<torch::optim::Adam>(OptimizerKind::kAdam,
                              torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).weight_decay(0.05).eps(1e-8), 6);
}

TEST(Optimizer, SgdNesterovUpdatesEqualTorchSgd) {
  compare<torch::optim::SGD>(OptimizerKind::kSgd,
                             torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(0.05), 6);
}

TEST(Optimizer, SgdPlainMomentumAndNoMomentum) {
  {
    Pair p(2);
    auto c = config(OptimizerKind::kSgd);
    c.nesterov = false;
    Optimizer ours(c, p.ours);
    torch::optim::SGD ref(p.ref, torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(0.05));
    for (int s = 0; s < 4; ++s) {
      p.set_grads(200 + static_cast<uint64_t>(s));
      ours.step(no_inf());
      ref.step();
    }
    expect_close(p.ours, p.ref, "sgd momentum");
  }
  {
    Pair p(3);
    auto c = config(OptimizerKind::kSgd);
    c.momentum = 0;
    c.nesterov = false;
    Optimizer ours(c, p.ours);
    torch::optim::SGD ref(p.ref, torch::optim::SGDOptions(0.01).weight_decay(0.05));
    for (int s = 0; s < 3; ++s) {
      p.set_grads(300 + static_cast<uint64_t>(s));
      ours.step(no_inf());
      ref.step();
    }
    expect_close(p.ours, p.ref, "sgd without momentum");
  }
}

// An Inf in one gradient: the flag comes from the gradient norm on the device, the step changes
// nothing (weights, moments, step counters), and the next good step continues exactly as if the
// bad one had never happened.
void inf_gradient_skips_exactly_that_step(OptimizerKind kind) {
  Pair p(4);
  Optimizer ours(config(kind), p.ours);
  Pair reference(4);  // the same run without the bad step
  Optimizer clean(config(kind), reference.ours);
  for (int s = 0; s < 2; ++s) {
    p.set_grads(400 + static_cast<uint64_t>(s));
    reference.set_grads(400 + static_cast<uint64_t>(s));
    ours.step(no_inf());
    clean.step(no_inf());
  }
  const auto before = snapshot(p.ours);
  torch::serialize::OutputArchive state_before;
  ours.save(state_before);
  std::ostringstream bytes_before;
  state_before.save_to(bytes_before);

  p.set_grads(999);
  p.ours[1].grad()[2] = std::numeric_limits<float>::infinity();
  const auto loss = torch::tensor(0.5f);
  const torch::Tensor found = nonfinite_flag(loss, ours.grad_norm());
  EXPECT_EQ(found.item<float>(), 1.0f);
  EXPECT_EQ(found.device(), p.ours[0].device());
  ours.step(found);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(p.ours[i], before[i])) << i;
  torch::serialize::OutputArchive state_after;
  ours.save(state_after);
  std::ostringstream bytes_after;
  state_after.save_to(bytes_after);
  EXPECT_EQ(bytes_before.str(), bytes_after.str()) << "optimizer state changed by a skipped step";
  EXPECT_EQ(ours.steps_applied(), 2);

  p.set_grads(402);
  reference.set_grads(402);
  EXPECT_EQ(nonfinite_flag(loss, ours.grad_norm()).item<float>(), 0.0f);
  ours.step(no_inf());
  clean.step(no_inf());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(p.ours[i], reference.ours[i])) << i;
}

TEST(Optimizer, InfGradientSkipsExactlyThatStepAdamW) { inf_gradient_skips_exactly_that_step(OptimizerKind::kAdamW); }
TEST(Optimizer, InfGradientSkipsExactlyThatStepAdam) { inf_gradient_skips_exactly_that_step(OptimizerKind::kAdam); }
TEST(Optimizer, InfGradientSkipsExactlyThatStepSgd) { inf_gradient_skips_exactly_that_step(OptimizerKind::kSgd); }

TEST(Optimizer, NanLossIsFlagged) {
  EXPECT_EQ(nonfinite_flag(torch::tensor(std::nanf("")), torch::tensor(1.0f)).item<float>(), 1.0f);
  EXPECT_EQ(nonfinite_flag(torch::tensor(-std::numeric_limits<float>::infinity()), torch::tensor(1.0f)).item<float>(),
            1.0f);
  EXPECT_EQ(nonfinite_flag(torch::tensor(2.0f), torch::tensor(3.0f)).item<float>(), 0.0f);
}

TEST(Optimizer, ClippingEqualsClipGradNorm) {
  for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
    Pair p(5);
    Optimizer ours(config(OptimizerKind::kAdamW), p.ours);
    p.set_grads(500, /*scale=*/3.0);
    const torch::Tensor norm = ours.grad_norm();
    ours.clip_grad_norm(norm, max_norm);
    const double ref_norm = torch::nn::utils::clip_grad_norm_(p.ref, max_norm);
    EXPECT_NEAR(norm.item<double>(), ref_norm, 1e-5 * ref_norm);
    std::vector<torch::Tensor> a, b;
    for (size_t i = 0; i < p.ours.size(); ++i) {
      a.push_back(p.ours[i].grad());
      b.push_back(p.ref[i].grad());
    }
    expect_close(a, b, fmt::format("clipped gradients, max_norm {}", max_norm));
  }
}

TEST(Optimizer, ZeroGradKeepsTheTensors) {
  Pair p(6);
  Optimizer ours(config(OptimizerKind::kAdamW), p.ours);
  p.set_grads(600);
  const void* address = p.ours[0].grad().data_ptr();
  ours.zero_grad();
  EXPECT_EQ(p.ours[0].grad().data_ptr(), address);
  for (const auto& t : p.ours) EXPECT_EQ(t.grad().abs().sum().item<double>(), 0.0);
  EXPECT_EQ(ours.grad_norm().item<float>(), 0.0f);
}

TEST(Optimizer, StateRoundTripsThroughAnArchive) {
  for (auto kind : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    Pair p(7);
    Optimizer a(config(kind), p.ours);
    for (int s = 0; s < 3; ++s) {
      p.set_grads(700 + static_cast<uint64_t>(s));
      a.set_lr(0.02);
      a.step(no_inf());
    }
    torch::serialize::OutputArchive out;
    a.save(out);
    std::stringstream bytes;
    out.save_to(bytes);
    // A fresh optimizer over copies of the parameters, loaded from the archive.
    std::vector<torch::Tensor> copies;
    for (const auto& t : p.ours) copies.push_back(t.detach().clone().requires_grad_(true));
    Optimizer b(config(kind), copies);
    torch::serialize::InputArchive in;
    in.load_from(bytes);
    b.load(in);
    EXPECT_EQ(b.steps_applied(), 3);
    EXPECT_FLOAT_EQ(b.lr().item<float>(), 0.02f);
    p.set_grads(799);
    for (size_t i = 0; i < copies.size(); ++i) copies[i].mutable_grad() = p.ours[i].grad().clone();
    a.step(no_inf());
    b.step(no_inf());
    for (size_t i = 0; i < copies.size(); ++i) EXPECT_TRUE(torch::equal(p.ours[i], copies[i])) << to_string(kind) << i;
  }
  // Another optimizer kind's state is refused with a message naming both.
  Pair p(8);
  Optimizer adam(config(OptimizerKind::kAdamW), p.ours);
  torch::serialize::OutputArchive out;
  adam.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  Optimizer sgd(config(OptimizerKind::kSgd), p.ref);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  try {
    sgd.load(in);
    FAIL() << "loaded adamw state into sgd";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("adamw optimizer state; training.optimizer is sgd"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace u3d
