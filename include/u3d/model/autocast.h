// Autocast for the forward pass: the precision a run computes in (training.precision resolved
// for the device), its autocast dtype, and an autocast scope (the C++ API has no torch.autocast).
// Training (train/amp.h adds the fp16 loss scaler), validation and prediction all use it.
//
//   AutocastGuard autocast(device.type(), at::kBFloat16);   // forward under autocast
//   torch::Tensor out = net->forward(x);                     // convolutions in bf16
//   // guard destroyed: previous autocast state back, cast cache cleared
//
// Precision resolution (training.precision): auto is fp32 on CPU; on CUDA it is fp16 with loss
// scaling for a batch-norm network (cuDNN has no bf16 batch norm, so ATen runs its slower native
// kernels in bf16; fp16 measured 21-25% faster than bf16 on every batch-norm network on an H100,
// issue 53) and bf16 otherwise (instance, group or no norm: no loss scaler needed). fp16 is CUDA
// only (ConfigError on CPU: CPU autocast has no float16 kernels worth using); bf16 works on CPU too
// (slower than fp32 there, but it lets CPU tests exercise the mixed-precision path).
#pragma once
#include <torch/torch.h>

#include <optional>
#include <string>

#include "u3d/core/config.h"

namespace u3d {

// training.precision for `device` and the network's norm (network_norm(), model/layout.h): never
// kAuto. ConfigError for fp16 without CUDA.
Precision resolve_precision(const TrainingConfig& cfg, Norm norm, const torch::Device& device);
// Why resolve_precision() decided as it did, for the log: "auto: fp16 with loss scaling (batch norm:
// cuDNN has no bf16 batch norm)"; "training.precision: bf16" when set.
std::string precision_reason(const TrainingConfig& cfg, Norm norm, const torch::Device& device);
// The autocast dtype of a resolved precision; std::nullopt for fp32 (no autocast).
std::optional<at::ScalarType> autocast_dtype(Precision precision);
// The autocast dtype for validation and prediction on `device`, from training.precision as
// training resolves it; fp16 where there is no CUDA (a CPU prediction of an fp16-trained model)
// predicts in fp32. std::nullopt: fp32.
std::optional<at::ScalarType> inference_autocast(const Config& cfg, const torch::Device& device);
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

}  // namespace u3d
