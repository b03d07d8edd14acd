#include "u3d/train/optimizer.h"

#include <fmt/ranges.h>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad());
  return grads;
}

std::vector<torch::Tensor> zeros_like_all(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  return out;
}

void save_list(torch::serialize::OutputArchive& ar, const std::string& name, const std::vector<torch::Tensor>& list) {
  for (size_t i = 0; i < list.size(); ++i) ar.write(fmt::format("{}.{}", name, i), list[i], /*is_buffer=*/true);
}

void load_list(torch::serialize::InputArchive& ar, const std::string& name, std::vector<torch::Tensor>& list) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < list.size(); ++i) {
    torch::Tensor t;
    const std::string key = fmt::format("{}.{}", name, i);
    if (!ar.try_read(key, t, /*is_buffer=*/true)) {
      throw CheckpointError(fmt::format("optimizer state '{}' is missing", key));
    }
    if (t.sizes() != list[i].sizes()) {
      throw CheckpointError(fmt::format("optimizer state '{}' has shape ({}) but the parameter needs ({})", key,
                                        fmt::join(t.sizes(), ", "), fmt::join(list[i].sizes(), ", ")));
    }
    list[i].copy_(t);
  }
}

}  // namespace

Optimizer::Optimizer(const TrainingConfig& cfg, std::vector<torch::Tensor> params)
    : kind_(cfg.optimizer),
      beta1_(cfg.betas.size() == 2 ? cfg.betas[0] : 0.9),
      beta2_(cfg.betas.size() == 2 ? cfg.betas[1] : 0.999),
      weight_decay_(cfg.weight_decay),
      momentum_(cfg.momentum),
      nesterov_(cfg.nesterov && cfg.momentum > 0),
      params_(std::move(params)) {
  if (params_.empty()) throw ConfigError("optimizer: the model has no trainable parameters");
  const auto options = params_[0].options();
  for (auto& p : params_) {
    if (p.device() != options.device() || p.scalar_type() != options.dtype().toScalarType()) {
      throw ConfigError("optimizer: every parameter must have the same device and dtype");
    }
    // Gradients exist from the start: a data-parallel run zeroes them in place (fixed addresses, its
    // bucket views); other runs drop them each step (zero_grad(true), then fill_missing_grads()).
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(options.device());
  lr_ = torch::full({}, cfg.lr, f32);
  switch (kind_) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      for (size_t i = 0; i < params_.size(); ++i) steps_.push_back(torch::zeros({}, f32));
      exp_avg_ = zeros_like_all(params_);
      exp_avg_sq_ = zeros_like_all(params_);
      break;
    case OptimizerKind::kSgd:
      if (momentum_ > 0) momentum_buffer_ = zeros_like_all(params_);
      sgd_steps_ = torch::zeros({}, f32);
      break;
  }
}

void Optimizer::set_lr(double lr) { lr_.fill_(lr); }

void Optimizer::match_parameter_layout() {
  torch::NoGradGuard no_grad;
  auto like = [](const torch::Tensor& p, const torch::Tensor& t) {
    return t.defined() && t.strides() != p.strides() ? torch::empty_like(p).copy_(t)
                                                     : t;  // empty_like keeps p's strides
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (p.grad().defined() && p.grad().strides() != p.strides()) p.mutable_grad() = like(p, p.grad());
    if (i < exp_avg_.size()) exp_avg_[i] = like(p, exp_avg_[i]);
    if (i < exp_avg_sq_.size()) exp_avg_sq_[i] = like(p, exp_avg_sq_[i]);
    if (i < momentum_buffer_.size()) momentum_buffer_[i] = like(p, momentum_buffer_[i]);
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  if (!set_to_none) {
    torch::_foreach_zero_(grads_of(params_));
    return;
  }
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

void Optimizer::fill_missing_grads() {
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p, torch::MemoryFormat::Preserve);
  }
}

torch::Tensor Optimizer::grad_norm() const {
  const auto norms = torch::_foreach_norm(grads_of(params_), 2);
  return (norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2)).to(torch::kFloat);
}

void Optimizer::clip_grad_norm(const torch::Tensor& norm, double max_norm) {
  const torch::Tensor coef = torch::clamp(max_norm / (norm + 1e-6), std::nullopt, 1.0);
  torch::_foreach_mul_(grads_of(params_), coef);
}

void Optimizer::step(const torch::Tensor& found_inf, const std::optional<torch::Tensor>& grad_scale) {
  torch::NoGradGuard no_grad;
  const torch::Tensor applied = 1.0 - found_inf;  // () float32: 1 when the update happens
  const auto grads = grads_of(params_);
  switch (kind_) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      // The kernels read the step count for bias correction; a skipped step must not count.
      torch::_foreach_add_(steps_, applied);
      if (kind_ == OptimizerKind::kAdamW) {
        at::_fused_adamw_(params_, grads, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps_, lr_, beta1_, beta2_,
                          weight_decay_, eps_, /*amsgrad=*/false, /*maximize=*/false, grad_scale, found_inf);
      } else {
        at::_fused_adam_(params_, grads, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps_, lr_, beta1_, beta2_,
                         weight_decay_, eps_, /*amsgrad=*/false, /*maximize=*/false, grad_scale, found_inf);
      }
      break;
    case OptimizerKind::kSgd:
      at::_fused_sgd_(params_, grads, momentum_buffer_, weight_decay_, momentum_, lr_, /*dampening=*/0.0, nesterov_,
                      /*maximize=*/false, /*is_first_step=*/false, grad_scale, found_inf);
      sgd_steps_.add_(applied);
      break;
  }
}

int64_t Optimizer::steps_applied() const {
  const torch::Tensor& s = kind_ == OptimizerKind::kSgd ? sgd_steps_ : steps_[0];
  return static_cast<int64_t>(s.item<float>());
}

void Optimizer::save(torch::serialize::OutputArchive& ar) const {
  ar.write("kind", c10::IValue(to_string(kind_)));
  ar.write("param_count", c10::IValue(static_cast<int64_t>(params_.size())));
  ar.write("lr", lr_, /*is_buffer=*/true);
  if (kind_ == OptimizerKind::kSgd) {
    ar.write("sgd_steps", sgd_steps_, /*is_buffer=*/true);
    save_list(ar, "momentum", momentum_buffer_);
  } else {
    save_list(ar, "step", steps_);
    save_list(ar, "exp_avg", exp_avg_);
    save_list(ar, "exp_avg_sq", exp_avg_sq_);
  }
}

void Optimizer::load(torch::serialize::InputArchive& ar) {
  c10::IValue kind, count;
  if (!ar.try_read("kind", kind) || !ar.try_read("param_count", count)) {
    throw CheckpointError("the optimizer state is not in this trainer's format");
  }
  if (kind.toStringRef() != to_string(kind_)) {
    throw CheckpointError(fmt::format("the checkpoint holds {} optimizer state; training.optimizer is {}",
                                      kind.toStringRef(), to_string(kind_)));
  }
  if (count.toInt() != static_cast<int64_t>(params_.size())) {
    throw CheckpointError(
        fmt::format("the optimizer state covers {} parameters; the model has {}", count.toInt(), params_.size()));
  }
  torch::NoGradGuard no_grad;
  torch::Tensor lr;
  if (ar.try_read("lr", lr, true)) lr_.copy_(lr);
  if (kind_ == OptimizerKind::kSgd) {
    torch::Tensor s;
    if (ar.try_read("sgd_steps", s, true)) sgd_steps_.copy_(s);
    load_list(ar, "momentum", momentum_buffer_);
  } else {
    load_list(ar, "step", steps_);
    load_list(ar, "exp_avg", exp_avg_);
    load_list(ar, "exp_avg_sq", exp_avg_sq_);
  }
}

torch::Tensor nonfinite_flag(const torch::Tensor& loss, const torch::Tensor& grad_norm) {
  return torch::logical_not(torch::isfinite(loss.detach()) & torch::isfinite(grad_norm)).to(torch::kFloat);
}

torch::Tensor nonfinite_flag(const torch::Tensor& loss) {
  return torch::logical_not(torch::isfinite(loss.detach())).to(torch::kFloat);
}

}  // namespace u3d
