// The optimizer: AdamW, Adam and SGD (Nesterov) whose whole state lives in tensors on the
// parameters' device, so a step needs no host read: the learning rate is a device tensor, step
// counters are float32 device tensors, and a step whose loss or gradient norm is not finite is
// skipped on the device (`found_inf`), leaving weights and optimizer state untouched. Nothing in
// step() reads a value back to the host, so the step can later be captured in a CUDA graph.
//
//   Optimizer opt(cfg.training, net->parameters());
//   opt.set_lr(schedule.at(step));                 // fills the device LR tensor
//   opt.zero_grad(/*set_to_none=*/true);  loss.backward();
//   opt.fill_missing_grads();                      // a zero gradient for a parameter backward missed
//   torch::Tensor norm = opt.grad_norm();          // device scalar, no sync
//   torch::Tensor found_inf = nonfinite(loss, norm);
//   opt.clip_grad_norm(norm, 1.0);                  // optional
//   opt.step(found_inf);                            // skipped on the device when found_inf == 1
//
// Kernels: AdamW/Adam run ATen's fused kernels (at::_fused_adamw_ / at::_fused_adam_, CPU and CUDA,
// tensor learning rate, found_inf and grad_scale handled inside the kernel). SGD runs ATen's fused
// SGD kernel (at::_fused_sgd_, same found_inf/grad_scale contract); a chain of foreach ops cannot
// skip an Inf gradient on the device without a per-tensor select, since 0 * Inf = NaN. Momentum
// buffers start at zero, which equals torch.optim.SGD's "first step copies the gradient" for
// dampening 0. Gradient clipping uses foreach ops (one norm per tensor, one global norm, one
// scale), as torch::nn::utils::clip_grad_norm_ does, without its host read.
// Updates equal torch::optim::AdamW/Adam/SGD to float32 rounding (tests/unit/train/optimizer_test.cpp).
#pragma once
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/model/checkpointed_state.h"

namespace u3d {

class Optimizer : public CheckpointedState {
 public:
  // Adam/AdamW: betas, eps 1e-8, weight_decay (AdamW: decoupled; Adam: L2 added to the gradient).
  // SGD: momentum, nesterov (needs momentum > 0), weight_decay (L2), dampening 0.
  Optimizer(const TrainingConfig& cfg, std::vector<torch::Tensor> params);

  // Sets the learning rate of the next step (a device fill, no sync).
  void set_lr(double lr);
  // float32 scalar on the parameters' device.
  const torch::Tensor& lr() const { return lr_; }

  // set_to_none false: sets every gradient to zero in place (keeps the tensors, so their addresses
  // stay fixed: data-parallel bucket views). true: drops the gradients, as PyTorch's default
  // zero_grad(set_to_none=True): the next backward writes each gradient instead of adding it to
  // zeros (no zeroing pass, no accumulate-add; under CUDA-graph capture the new gradients come from
  // the graph's pool and each replay rewrites them). Call fill_missing_grads() after that backward.
  void zero_grad(bool set_to_none = false);
  // Gives every parameter without a gradient (one backward did not reach, after zero_grad(true)) a
  // zero gradient in its own layout, so the fused kernels and the norm see a full list. Host check
  // only; allocates only for such parameters.
  void fill_missing_grads();
  // Global L2 norm of all gradients as a float32 device scalar (no host read). A parameter
  // without a gradient counts as zero.
  torch::Tensor grad_norm() const;
  // Scales the gradients by min(1, max_norm / (norm + 1e-6)), as torch::nn::utils::clip_grad_norm_
  // does; `norm` is grad_norm()'s result.
  void clip_grad_norm(const torch::Tensor& norm, double max_norm);

  // One update. `found_inf`: float32 scalar on the device, 1 skips the update (weights, moments,
  // momentum buffers and step counters unchanged), 0 applies it. `grad_scale` (fp16 loss scaling):
  // gradients are divided by it inside the kernel. Neither is read on the host.
  void step(const torch::Tensor& found_inf, const std::optional<torch::Tensor>& grad_scale = std::nullopt);

  // Gives every gradient, moment and momentum buffer its parameter's strides (a checkpoint written
  // in another layout gives the parameters its strides; ATen's fused kernels need one layout per
  // parameter, gradient and state). Values are kept. Call before the first step of a run.
  void match_parameter_layout();

  OptimizerKind kind() const { return kind_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // Updates applied so far (skipped steps not counted); reads the device (tests, logging).
  int64_t steps_applied() const;

  // State into / out of a checkpoint archive: kind, learning rate, step counters, moments or
  // momentum buffers. load() checks kind and shapes and throws CheckpointError on a mismatch.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  OptimizerKind kind_;
  double beta1_, beta2_, eps_ = 1e-8, weight_decay_, momentum_;
  bool nesterov_;
  std::vector<torch::Tensor> params_;
  torch::Tensor lr_;                                 // () float32, device
  std::vector<torch::Tensor> steps_;                 // Adam: () float32 per parameter, device
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // Adam moments, like the parameters
  std::vector<torch::Tensor> momentum_buffer_;       // SGD with momentum, like the parameters
  torch::Tensor sgd_steps_;                          // SGD: () float32 count of applied updates, device
};

// 1.0 (float32 device scalar) when `loss` or `grad_norm` is NaN or +-Inf, else 0.0; no host read.
torch::Tensor nonfinite_flag(const torch::Tensor& loss, const torch::Tensor& grad_norm);
// 1.0 (float32 device scalar) when `loss` is NaN or +-Inf, else 0.0; no host read. The step's flag
// when no clipping needs the gradient norm (train_step.h).
torch::Tensor nonfinite_flag(const torch::Tensor& loss);

}  // namespace u3d
