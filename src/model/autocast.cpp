#include "u3d/model/autocast.h"

#include <ATen/autocast_mode.h>

#include "u3d/core/errors.h"
#include "u3d/model/layout.h"

namespace u3d {

Precision resolve_precision(const TrainingConfig& cfg, Norm norm, const torch::Device& device) {
  switch (cfg.precision) {
    case Precision::kAuto:
      if (!device.is_cuda()) return Precision::kFp32;
      return norm == Norm::kBatch ? Precision::kFp16 : Precision::kBf16;
    case Precision::kFp16:
      if (!device.is_cuda()) {
        throw ConfigError(
            fmt::format("training.precision: fp16 needs a CUDA device, and training runs on {}; use "
                        "bf16 or fp32 there",
                        device.str()));
      }
      return Precision::kFp16;
    default: return cfg.precision;
  }
}

std::string precision_reason(const TrainingConfig& cfg, Norm norm, const torch::Device& device) {
  if (cfg.precision != Precision::kAuto) return fmt::format("training.precision: {}", to_string(cfg.precision));
  if (!device.is_cuda()) return "auto: fp32 (no CUDA device: CPU autocast is slower than fp32)";
  if (norm == Norm::kBatch) return "auto: fp16 with loss scaling (batch norm: cuDNN has no bf16 batch norm)";
  return fmt::format("auto: bf16 ({}: no loss scaler needed)",
                     norm == Norm::kNone ? "no norm" : to_string(norm) + " norm");
}

std::optional<at::ScalarType> autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return at::kBFloat16;
    case Precision::kFp16: return at::kHalf;
    default: return std::nullopt;
  }
}

std::optional<at::ScalarType> inference_autocast(const Config& cfg, const torch::Device& device) {
  if (cfg.training.precision == Precision::kFp16 && !device.is_cuda()) return std::nullopt;
  return autocast_dtype(resolve_precision(cfg.training, network_norm(cfg.model), device));
}

std::string precision_name(Precision precision) { return to_string(precision); }

AutocastGuard::AutocastGuard(at::DeviceType device_type, at::ScalarType dtype, bool cache_enabled)
    : device_type_(device_type),
      prev_enabled_(at::autocast::is_autocast_enabled(device_type)),
      prev_dtype_(at::autocast::get_autocast_dtype(device_type)),
      prev_cache_enabled_(at::autocast::is_autocast_cache_enabled()) {
  at::autocast::set_autocast_enabled(device_type, true);
  at::autocast::set_autocast_dtype(device_type, dtype);
  at::autocast::set_autocast_cache_enabled(cache_enabled);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // As torch.autocast.__exit__: the outermost scope drops the cached weight casts.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_enabled_);
}

}  // namespace u3d
