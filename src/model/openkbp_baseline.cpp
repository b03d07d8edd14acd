#include "u3d/model/openkbp_baseline.h"

#include "u3d/model/channels_last_batch_norm.h"
#include "u3d/model/split_concat_conv.h"

namespace u3d {
namespace {

// Keras BatchNormalization(momentum=0.99, epsilon=1e-3): torch's momentum weighs the new batch.
torch::nn::BatchNorm3d keras_batch_norm(int64_t channels) {
  return torch::nn::BatchNorm3d(torch::nn::BatchNorm3dOptions(channels).momentum(0.01).eps(1e-3));
}

}  // namespace

OpenKbpBaselineImpl::OpenKbpBaselineImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels) {
  const int64_t f = cfg.base_filters;
  const std::vector<int64_t> down_filters = {f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f};
  int64_t prev = in_channels;
  for (size_t i = 0; i < down_filters.size(); ++i) {
    down_.push_back(register_module("down" + std::to_string(i + 1),
                                    torch::nn::Conv3d(torch::nn::Conv3dOptions(prev, down_filters[i], /*kernel_size=*/4)
                                                          .stride(2)
                                                          .padding(1)  // TF 'same' for k 4, s 2: one voxel each side
                                                          .bias(false))));
    if (i + 1 < down_filters.size()) {
      down_norm_.push_back(
          register_module("down" + std::to_string(i + 1) + "_norm", keras_batch_norm(down_filters[i])));
    }
    prev = down_filters[i];
  }
  // Decoder: output filters and input channels (the previous output, concatenated with the
  // matching encoder output from the second block on).
  const std::vector<int64_t> up_filters = {8 * f, 8 * f, 4 * f, 2 * f, f};
  const std::vector<int64_t> up_inputs = {8 * f, 8 * f + 8 * f, 8 * f + 8 * f, 4 * f + 4 * f, 2 * f + 2 * f};
  for (size_t i = 0; i < up_filters.size(); ++i) {
    up_.push_back(register_module(
        "up" + std::to_string(i + 1),
        torch::nn::ConvTranspose3d(torch::nn::ConvTranspose3dOptions(up_inputs[i], up_filters[i], /*kernel_size=*/4)
                                       .stride(2)
                                       .padding(1)  // TF 'same': output = 2 x input
                                       .bias(false))));
    up_norm_.push_back(register_module("up" + std::to_string(i + 1) + "_norm", keras_batch_norm(up_filters[i])));
  }
  dropout_ = register_module("dropout", torch::nn::Dropout3d(/*p=*/0.2));
  head_ = register_module(
      "head",
      torch::nn::ConvTranspose3d(
          torch::nn::ConvTranspose3dOptions(f + f, out_channels, /*kernel_size=*/4).stride(2).padding(1).bias(true)));
  // Keras defaults: Glorot (Xavier) uniform kernels, zero biases; BatchNorm starts at 1 / 0.
  torch::NoGradGuard no_grad;
  for (auto& conv : down_) torch::nn::init::xavier_uniform_(conv->weight);
  for (auto& up : up_) torch::nn::init::xavier_uniform_(up->weight);
  torch::nn::init::xavier_uniform_(head_->weight);
  torch::nn::init::zeros_(head_->bias);
}

torch::Tensor OpenKbpBaselineImpl::forward(const torch::Tensor& x) {
  // Encoder: skips[i] = x_{i+1}, (N, filters, S / 2^(i+1), ...).
  std::vector<torch::Tensor> skips;
  torch::Tensor y = x;
  for (size_t i = 0; i < down_.size(); ++i) {
    y = down_[i](y);
    y = i < down_norm_.size() ? batch_norm_act(*down_norm_[i], y, NormActivation::kLeakyRelu, /*negative_slope=*/0.2)
                              : torch::leaky_relu(y, /*negative_slope=*/0.2);
    skips.push_back(y);
  }
  // Decoder: block i (0-based) up-samples to the resolution of x_{5-i}; blocks 1..4 first
  // concatenate the previous output with x_{6-i}; dropout after blocks 2 and 4 (1-based).
  for (size_t i = 0; i < up_.size(); ++i) {
    const bool split = split_concat_applies(split_concat_, y);
    torch::Tensor z;
    if (i == 0) {
      z = up_[i](y);
    } else if (split) {  // the transposed convolution over (y, skip) without the concatenation
      z = conv_over_concat(*up_[i], {y, skips[skips.size() - 1 - i]});
    } else {
      z = up_[i](torch::cat({y, skips[skips.size() - 1 - i]}, /*dim=*/1));
    }
    const bool drop = i == 1 || i == 3;
    if (drop && !batch_norm_act_fuses(*up_norm_[i], z)) {  // norm, dropout, relu: the ATen path as always
      y = torch::relu(dropout_(channels_last_batch_norm(*up_norm_[i], z)));
    } else {  // channel dropout (a factor >= 0 per channel) commutes with relu: after the fused pass
      y = batch_norm_act(*up_norm_[i], z, NormActivation::kRelu, /*negative_slope=*/0.0);
      if (drop) y = dropout_(y);
    }
  }
  // (N, f, S/2, ...) and (N, f, S/2, ...) -> (N, out, S, ...)
  y = split_concat_applies(split_concat_, y) ? conv_over_concat(*head_, {y, skips[0]})
                                             : head_(torch::cat({y, skips[0]}, /*dim=*/1));
  y = same_mean3(y, /*by_convolution=*/y.is_cuda() && at::globalContext().deterministicAlgorithms());
  return torch::relu(y);
}

torch::Tensor same_mean3(const torch::Tensor& y, bool by_convolution) {
  if (!by_convolution) {
    return torch::nn::functional::avg_pool3d(
        y, torch::nn::functional::AvgPool3dFuncOptions(3).stride(1).padding(1).count_include_pad(false));
  }
  const int64_t c = y.size(1);
  const torch::Tensor ones = torch::ones({c, 1, 3, 3, 3}, y.options());
  const torch::Tensor sum =
      torch::conv3d(y, ones, /*bias=*/{}, /*stride=*/1, /*padding=*/1, /*dilation=*/1, /*groups=*/c);
  const torch::Tensor inside = torch::ones({1, 1, y.size(2), y.size(3), y.size(4)}, y.options());
  const torch::Tensor count = torch::conv3d(inside, ones.narrow(0, 0, 1), /*bias=*/{}, 1, 1);  // (1, 1, D, H, W)
  return sum / count;
}

}  // namespace u3d
