#include "u3d/model/channels_last_batch_norm.h"

#include "u3d/kernels/fused_families.h"

namespace u3d {
namespace {

// The running statistics' weight of this forward, as torch::nn::BatchNorm3d's: counts the batch in
// num_batches_tracked when training and tracking; without a momentum the cumulative average 1 / count.
double running_stats_factor(torch::nn::BatchNorm3dImpl& bn) {
  const auto& options = bn.options;
  double factor = options.momentum().value_or(0.0);
  if (bn.is_training() && options.track_running_stats() && bn.num_batches_tracked.defined()) {
    bn.num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / bn.num_batches_tracked.item<double>();  // cumulative average
  }
  return factor;
}

}  // namespace

torch::Tensor channels_last_batch_norm(torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x) {
  if (x.dim() != 5 || x.is_contiguous() || !x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) return bn.forward(x);
  const auto& options = bn.options;
  const double factor = running_stats_factor(bn);
  const auto sizes = x.sizes();
  const torch::Tensor flat = x.view({sizes[0], sizes[1], sizes[2] * sizes[3], sizes[4]});  // (N, C, D * H, W)
  const torch::Tensor y = torch::batch_norm(flat, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                            /*training=*/bn.is_training() || !options.track_running_stats(), factor,
                                            options.eps(), at::globalContext().userEnabledCuDNN());
  return y.reshape(sizes);  // a view when y kept x's layout (every ATen path does)
}

bool batch_norm_act_fuses(const torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x) {
  return kernels::enabled(kernels::Family::kBatchNorm) && bn.is_training() && bn.options.affine() &&
         kernels::applies(x, bn.weight, bn.bias);
}

torch::Tensor batch_norm_act(torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x, NormActivation activation,
                             double negative_slope) {
  if (batch_norm_act_fuses(bn, x)) {
    const double factor = running_stats_factor(bn);
    const bool track = bn.options.track_running_stats() && bn.running_mean.defined();
    return kernels::batch_norm_act(x, bn.weight, bn.bias, track ? bn.running_mean : torch::Tensor(),
                                   track ? bn.running_var : torch::Tensor(), factor, bn.options.eps(),
                                   fused_activation(activation, negative_slope));
  }
  return apply_activation(channels_last_batch_norm(bn, x), activation, negative_slope);
}

torch::Tensor apply_norm(torch::nn::AnyModule& norm, const torch::Tensor& x) {
  if (auto* bn = norm.ptr()->as<torch::nn::BatchNorm3dImpl>()) return channels_last_batch_norm(*bn, x);
  return norm.forward(x);
}

}  // namespace u3d
