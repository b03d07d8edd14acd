#include "u3d/train/amp.h"

namespace u3d {

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
