#include "u3d/model/mlperf_unet3d.h"

#include "u3d/model/channels_last_batch_norm.h"
#include "u3d/model/channels_last_norm.h"
#include "u3d/model/split_concat_conv.h"

namespace u3d {

MlperfConvImpl::MlperfConvImpl(int64_t in, int64_t out, Shape shape, const ModelConfig& cfg)
    : activation_(cfg.activation), negative_slope_(cfg.negative_slope), plain_(shape.plain) {
  const Norm norm = shape.plain ? Norm::kNone : cfg.norm;
  const bool bias = norm == Norm::kNone;  // the reference: bias only without a norm
  if (shape.transposed) {
    conv_ = torch::nn::AnyModule(torch::nn::ConvTranspose3d(torch::nn::ConvTranspose3dOptions(in, out, shape.kernel)
                                                                .stride(shape.stride)
                                                                .padding(shape.padding)
                                                                .bias(bias)));
  } else {
    conv_ = torch::nn::AnyModule(torch::nn::Conv3d(
        torch::nn::Conv3dOptions(in, out, shape.kernel).stride(shape.stride).padding(shape.padding).bias(bias)));
  }
  register_module("0", conv_.ptr());
  switch (norm) {
    case Norm::kInstance: norm_ = torch::nn::AnyModule(ChannelsLastNorm(out, /*groups=*/0)); break;
    case Norm::kGroup: {
      int64_t g = std::min(cfg.norm_groups, out);  // largest divisor of `out` not above the requested count
      while (out % g != 0) --g;
      norm_ = torch::nn::AnyModule(ChannelsLastNorm(out, g));
      break;
    }
    case Norm::kBatch: norm_ = torch::nn::AnyModule(torch::nn::BatchNorm3d(out)); break;
    case Norm::kNone: break;
  }
  if (!norm_.is_empty()) register_module("1", norm_.ptr());
}

torch::Tensor MlperfConvImpl::forward(const torch::Tensor& x) { return after_conv(conv_.forward(x)); }

torch::Tensor MlperfConvImpl::forward_parts(const std::vector<torch::Tensor>& parts) {
  const auto* conv = conv_.ptr()->as<torch::nn::Conv3d>();
  TORCH_CHECK(conv, "MlperfConv::forward_parts: a transposed convolution");
  return after_conv(conv_over_concat(*conv, parts));
}

torch::Tensor MlperfConvImpl::after_conv(torch::Tensor y) {
  if (plain_) return y;
  if (auto* norm = norm_.is_empty() ? nullptr : norm_.ptr()->as<ChannelsLastNormImpl>()) {
    if (const auto fused = fusable_activation(activation_)) return norm->forward_act(y, *fused, negative_slope_);
  }
  if (auto* bn = norm_.is_empty() ? nullptr : norm_.ptr()->as<torch::nn::BatchNorm3dImpl>()) {
    if (const auto fused = fusable_activation(activation_)) return batch_norm_act(*bn, y, *fused, negative_slope_);
  }
  if (!norm_.is_empty()) y = apply_norm(norm_, y);
  switch (activation_) {
    case Activation::kRelu: return torch::relu(y);
    case Activation::kLeakyRelu: return torch::leaky_relu(y, negative_slope_);
    case Activation::kGelu: return torch::gelu(y);
    case Activation::kElu: return torch::elu(y);
  }
  return y;
}

MlperfBlockImpl::MlperfBlockImpl(int64_t in, int64_t out, int64_t stride, const ModelConfig& cfg) {
  const int64_t k = cfg.kernel_size;
  conv1_ = register_module("conv1", MlperfConv(in, out, MlperfConvImpl::Shape{k, stride, k / 2}, cfg));
  conv2_ = register_module("conv2", MlperfConv(out, out, MlperfConvImpl::Shape{k, /*stride=*/1, k / 2}, cfg));
}

MlperfUpBlockImpl::MlperfUpBlockImpl(int64_t in, int64_t out, const ModelConfig& cfg) {
  const int64_t k = cfg.kernel_size;
  upsample_conv_ = register_module(
      "upsample_conv", MlperfConv(in, out,
                                  MlperfConvImpl::Shape{/*kernel=*/2, /*stride=*/2, /*padding=*/0, /*transposed=*/true,
                                                        /*plain=*/true},
                                  cfg));
  conv1_ = register_module("conv1", MlperfConv(2 * out, out, MlperfConvImpl::Shape{k, /*stride=*/1, k / 2}, cfg));
  conv2_ = register_module("conv2", MlperfConv(out, out, MlperfConvImpl::Shape{k, /*stride=*/1, k / 2}, cfg));
}

torch::Tensor MlperfUpBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& skip) {
  const torch::Tensor up = upsample_conv_(x);
  if (split_concat_applies(split_concat_, up)) return conv2_(conv1_->forward_parts({up, skip}));
  return conv2_(conv1_(torch::cat({up, skip}, /*dim=*/1)));
}

MlperfUNet3dImpl::MlperfUNet3dImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels)
    : levels_(cfg.levels) {
  std::vector<int64_t> f;  // 32, 64, 128, 256, 320, 320 for the preset
  for (int64_t l = 0; l < levels_; ++l) f.push_back(std::min(cfg.base_filters << l, cfg.max_filters));
  input_block_ = register_module("input_block", MlperfBlock(in_channels, f[0], /*stride=*/1, cfg));
  for (int64_t i = 0; i + 2 < levels_; ++i) downsample_->push_back(MlperfBlock(f[i], f[i + 1], /*stride=*/2, cfg));
  register_module("downsample", downsample_);
  bottleneck_ = register_module(
      "bottleneck", MlperfBlock(f[static_cast<size_t>(levels_ - 2)], f[static_cast<size_t>(levels_ - 1)], 2, cfg));
  for (int64_t j = 0; j + 1 < levels_; ++j) {
    upsample_.push_back(
        MlperfUpBlock(f[static_cast<size_t>(levels_ - 1 - j)], f[static_cast<size_t>(levels_ - 2 - j)], cfg));
    upsample_list_->push_back(upsample_.back());
  }
  register_module("upsample", upsample_list_);
  auto output = std::make_shared<torch::nn::Module>();
  output_conv_ = output->register_module(
      "conv", MlperfConv(f[0], out_channels,
                         MlperfConvImpl::Shape{/*kernel=*/1, /*stride=*/1, /*padding=*/0, /*transposed=*/false,
                                               /*plain=*/true},
                         cfg));
  register_module("output", output);
}

void MlperfUNet3dImpl::set_split_concat(bool on) {
  for (auto& block : upsample_) block->set_split_concat(on);
}

torch::Tensor MlperfUNet3dImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = input_block_(x);
  std::vector<torch::Tensor> skips = {y};  // (N, f_l, D / 2^l, H / 2^l, W / 2^l), l = 0 .. levels - 2
  for (auto& block : *downsample_) {
    y = block->as<MlperfBlockImpl>()->forward(y);
    skips.push_back(y);
  }
  y = bottleneck_(y);
  for (size_t j = 0; j < upsample_.size(); ++j) y = upsample_[j](y, skips[skips.size() - 1 - j]);
  return output_conv_(y);
}

}  // namespace u3d
