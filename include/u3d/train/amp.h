// Mixed precision: an autocast scope (the C++ API has no torch.autocast) and a dynamic loss scaler
// for fp16 whose whole state stays on the device.
//
//   AutocastGuard autocast(device.type(), at::kBFloat16);   // forward under autocast
//   torch::Tensor out = net->forward(x);                     // convolutions in bf16
//   // guard destroyed: previous autocast state back, cast cache cleared
//
//   GradScaler scaler(device);                               // fp16 only
//   (loss * scaler.scale()).backward();
//   torch::Tensor found_inf = scaler.unscale_(grads);        // () float32 0/1, no host read
//   optimizer.step(found_inf);
//   scaler.update(found_inf);                                // back off on Inf/NaN, grow every 2000 steps
//
// Precision resolution (training.precision): auto is bf16 on CUDA and fp32 on CPU; fp16 is CUDA
// only (ConfigError on CPU: CPU autocast has no float16 kernels worth using); bf16 works on CPU too
// (slower than fp32 there, but it lets CPU tests exercise the mixed-precision path).
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

// training.precision for `device`: never kAuto. ConfigError for fp16 without CUDA.
Precision resolve_precision(const TrainingConfig& cfg, const torch::Device& device);
// The autocast dtype of a resolved precision; std::nullopt for fp32 (no autocast).
std::optional<at::ScalarType> autocast_dtype(Precision precision);
// The autocast dtype for validation and prediction on `device`, from training.precision as
// training resolves it; fp16 where there is no CUDA (a CPU prediction of an fp16-trained model)
// predicts in fp32. std::nullopt: fp32.
std::optional<at::ScalarType> inference_autocast(const TrainingConfig& cfg, const torch::Device& device);
// "fp32" | "bf16" | "fp16"
std::string precision_name(Precision precision);

// Autocast on for `device_type` with `dtype` while alive, as Python's `with torch.autocast(...)`:
// sets the enabled flag and dtype, increments the nesting level; the destructor restores the
// previous flag and dtype, and clears the cast cache when the outermost scope ends. Nests.
// `cache_enabled` false disables the weight-cast cache inside the scope (needed while capturing a
// CUDA graph: a cached cast made outside the graph would be replayed as a stale tensor).
class AutocastGuard {
 public:
  AutocastGuard(at::DeviceType device_type, at::ScalarType dtype, bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  at::DeviceType device_type_;
  bool prev_enabled_;
  at::ScalarType prev_dtype_;
  bool prev_cache_enabled_;
};

// Dynamic loss scaling (torch.amp.GradScaler's algorithm) with the scale (float32) and growth
// tracker (int32) as device tensors: unscale_ and update are ATen's _amp_ kernels (CPU and CUDA),
// so a step with loss scaling reads nothing back and can be captured in a CUDA graph.
class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;  // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;  // steps without Inf/NaN before the scale grows
  };
  explicit GradScaler(const torch::Device& device) : GradScaler(device, Options{}) {}
  GradScaler(const torch::Device& device, Options options);

  // () float32 on the device; multiply the loss by it before backward.
  const torch::Tensor& scale() const { return scale_; }
  // Divides every gradient in place by the scale and returns found_inf: () float32, 1 when any
  // gradient holds Inf or NaN (the step must be skipped), else 0. Undefined gradients are ignored.
  // Gradients must be float32 or float16 on the scaler's device.
  torch::Tensor unscale_(const std::vector<torch::Tensor>& params);
  // After the step: found_inf == 1 multiplies the scale by backoff_factor and resets the tracker;
  // growth_interval clean steps in a row multiply it by growth_factor. On the device, in place.
  void update(const torch::Tensor& found_inf);

  // Host reads (checkpoints, logs, tests).
  double scale_value() const;
  int64_t growth_tracker_value() const;
  // Restores a saved state (in place, so tensors captured in a CUDA graph stay valid).
  void load(double scale, int64_t growth_tracker);

 private:
  Options options_;
  torch::Tensor scale_;           // () float32
  torch::Tensor growth_tracker_;  // () int32
  torch::Tensor found_inf_;       // () float32, reused by unscale_
};

}  // namespace u3d
