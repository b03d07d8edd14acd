#include "u3d/train/amp.h"

#include <ATen/autocast_mode.h>

#include "u3d/core/errors.h"

namespace u3d {

Precision resolve_precision(const TrainingConfig& cfg, const torch::Device& device) {
  switch (cfg.precision) {
    case Precision::kAuto: return device.is_cuda() ? Precision::kBf16 : Precision::kFp32;
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

std::optional<at::ScalarType> autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return at::kBFloat16;
    case Precision::kFp16: return at::kHalf;
    default: return std::nullopt;
  }
}

std::optional<at::ScalarType> inference_autocast(const TrainingConfig& cfg, const torch::Device& device) {
  if (cfg.precision == Precision::kFp16 && !device.is_cuda()) return std::nullopt;
  return autocast_dtype(resolve_precision(cfg, device));
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

GradScaler::GradScaler(const torch::Device& device, Options options) : options_(options) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  scale_ = torch::full({}, options_.init_scale, f32);
  growth_tracker_ = torch::zeros({}, f32.dtype(torch::kInt));
  found_inf_ = torch::zeros({}, f32);
}

torch::Tensor GradScaler::unscale_(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  found_inf_.zero_();
  const torch::Tensor inv_scale = scale_.reciprocal();  // () float32, on the device
  if (!grads.empty()) at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  return found_inf_;
}

void GradScaler::update(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

double GradScaler::scale_value() const { return scale_.item<double>(); }
int64_t GradScaler::growth_tracker_value() const { return growth_tracker_.item<int64_t>(); }

void GradScaler::load(double scale, int64_t growth_tracker) {
  scale_.fill_(scale);
  growth_tracker_.fill_(growth_tracker);
}

}  // namespace u3d
