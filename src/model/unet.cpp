#include "u3d/unet.h"

#include "u3d/errors.h"
#include "u3d/openkbp_baseline.h"

namespace u3d {
namespace {

torch::nn::AnyModule make_norm(Norm norm, int64_t channels, int64_t groups) {
  switch (norm) {
    case Norm::kBatch: return torch::nn::AnyModule(torch::nn::BatchNorm3d(channels));
    case Norm::kInstance:
      return torch::nn::AnyModule(
          torch::nn::InstanceNorm3d(torch::nn::InstanceNorm3dOptions(channels).affine(true).track_running_stats(false)));
    case Norm::kGroup: {
      // Largest divisor of `channels` not above the requested group count.
      int64_t g = std::min(groups, channels);
      while (channels % g != 0) --g;
      return torch::nn::AnyModule(torch::nn::GroupNorm(torch::nn::GroupNormOptions(g, channels)));
    }
    case Norm::kNone: break;
  }
  return {};
}

void init_weights(torch::nn::Module& module, double negative_slope) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv3d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, negative_slope, torch::kFanIn, torch::kLeakyReLU);
      if (conv->bias.defined()) torch::nn::init::zeros_(conv->bias);
    } else if (auto* up = m->as<torch::nn::ConvTranspose3d>()) {
      torch::nn::init::kaiming_normal_(up->weight, negative_slope, torch::kFanIn, torch::kLeakyReLU);
      if (up->bias.defined()) torch::nn::init::zeros_(up->bias);
    }
  }
}

}  // namespace

ConvBlockImpl::ConvBlockImpl(int64_t in, int64_t out, int64_t stride, const ModelConfig& cfg)
    : activation_(cfg.activation), negative_slope_(cfg.negative_slope) {
  const int64_t k = cfg.kernel_size;
  conv_ = register_module("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, k)
                                                        .stride(stride)
                                                        .padding(k / 2)
                                                        .bias(cfg.norm == Norm::kNone)));
  if (cfg.dropout > 0) dropout_ = register_module("dropout", torch::nn::Dropout3d(cfg.dropout));
  norm_ = make_norm(cfg.norm, out, cfg.norm_groups);
  if (!norm_.is_empty()) register_module("norm", norm_.ptr());
}

torch::Tensor ConvBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = conv_(x);
  if (dropout_) y = dropout_(y);
  if (!norm_.is_empty()) y = norm_.forward(y);
  switch (activation_) {
    case Activation::kRelu: return torch::relu(y);
    case Activation::kLeakyRelu: return torch::leaky_relu(y, negative_slope_);
    case Activation::kGelu: return torch::gelu(y);
    case Activation::kElu: return torch::elu(y);
  }
  return y;
}

UNet3dImpl::UNet3dImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels)
    : levels_(cfg.levels), output_activation_(cfg.output_activation) {
  for (int64_t l = 0; l < levels_; ++l) filters_.push_back(std::min(cfg.base_filters << l, cfg.max_filters));
  int64_t prev = in_channels;
  for (int64_t l = 0; l < levels_; ++l) {
    torch::nn::Sequential stage;
    for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
      const int64_t stride = (l > 0 && c == 0) ? 2 : 1;
      stage->push_back(ConvBlock(c == 0 ? prev : filters_[l], filters_[l], stride, cfg));
    }
    encoder_.push_back(register_module(fmt::format("encoder{}", l), stage));
    prev = filters_[l];
  }
  for (int64_t l = levels_ - 2; l >= 0; --l) {
    up_.push_back(register_module(
        fmt::format("up{}", l),
        torch::nn::ConvTranspose3d(torch::nn::ConvTranspose3dOptions(filters_[l + 1], filters_[l], 2).stride(2))));
    torch::nn::Sequential stage;
    for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
      stage->push_back(ConvBlock(c == 0 ? 2 * filters_[l] : filters_[l], filters_[l], /*stride=*/1, cfg));
    }
    decoder_.push_back(register_module(fmt::format("decoder{}", l), stage));
  }
  head_ = register_module("head", torch::nn::Conv3d(torch::nn::Conv3dOptions(filters_[0], out_channels, 1)));
  if (cfg.deep_supervision) {
    for (int64_t l = 1; l + 1 < levels_; ++l) {
      deep_heads_.push_back(register_module(fmt::format("deep_head{}", l),
                                            torch::nn::Conv3d(torch::nn::Conv3dOptions(filters_[l], out_channels, 1))));
    }
  }
  init_weights(*this, cfg.activation == Activation::kLeakyRelu ? cfg.negative_slope : 0.0);
}

torch::Tensor UNet3dImpl::forward(const torch::Tensor& x) { return run(x, nullptr); }

std::vector<torch::Tensor> UNet3dImpl::forward_deep(const torch::Tensor& x) {
  if (deep_heads_.empty()) return {forward(x)};
  std::vector<torch::Tensor> deep;  // coarsest first while decoding
  torch::Tensor full = run(x, &deep);
  std::vector<torch::Tensor> out = {full};
  out.insert(out.end(), deep.rbegin(), deep.rend());  // (N, K, D / 2^l, ...) for l = 1, 2, ...
  return out;
}

torch::Tensor UNet3dImpl::run(const torch::Tensor& x, std::vector<torch::Tensor>* deep) {
  std::vector<torch::Tensor> skips;  // (N, f_l, D / 2^l, H / 2^l, W / 2^l)
  torch::Tensor y = x;
  for (int64_t l = 0; l < levels_; ++l) {
    y = encoder_[static_cast<size_t>(l)]->forward(y);
    skips.push_back(y);
  }
  for (size_t i = 0; i < up_.size(); ++i) {
    const int64_t l = levels_ - 2 - static_cast<int64_t>(i);
    y = up_[i](y);
    y = torch::cat({y, skips[static_cast<size_t>(l)]}, /*dim=*/1);
    y = decoder_[i]->forward(y);
    if (deep && l >= 1 && static_cast<size_t>(l) <= deep_heads_.size()) {
      deep->push_back(deep_heads_[static_cast<size_t>(l - 1)](y));  // (N, K, D / 2^l, H / 2^l, W / 2^l)
    }
  }
  y = head_(y);
  switch (output_activation_) {
    case OutputActivation::kRelu: return torch::relu(y);
    case OutputActivation::kSigmoid: return torch::sigmoid(y);
    case OutputActivation::kNone: break;
  }
  return y;
}

Network build_network(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels) {
  switch (cfg.architecture) {
    case Architecture::kUNet: return std::make_shared<UNet3dImpl>(cfg, in_channels, out_channels);
    case Architecture::kOpenKbpBaseline: return std::make_shared<OpenKbpBaselineImpl>(cfg, in_channels, out_channels);
  }
  throw ConfigError("model.architecture: unknown architecture");
}

int64_t count_parameters(const torch::nn::Module& module, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

}  // namespace u3d
