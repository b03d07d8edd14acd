#include "u3d/model/unet.h"

#include <ATen/record_function.h>

#include "u3d/core/errors.h"
#include "u3d/core/stage_geometry.h"
#include "u3d/model/channels_last_batch_norm.h"
#include "u3d/model/channels_last_norm.h"
#include "u3d/model/checkpointing.h"
#include "u3d/model/mean_pool.h"
#include "u3d/model/split_concat_conv.h"

namespace u3d {
namespace {

torch::nn::AnyModule make_norm(Norm norm, int64_t channels, int64_t groups) {
  switch (norm) {
    case Norm::kBatch: return torch::nn::AnyModule(torch::nn::BatchNorm3d(channels));
    // Instance and group norm keep a channels-last layout (model/channels_last_norm.h).
    case Norm::kInstance: return torch::nn::AnyModule(ChannelsLastNorm(channels, /*groups=*/0));
    case Norm::kGroup: {
      // Largest divisor of `channels` not above the requested group count.
      int64_t g = std::min(groups, channels);
      while (channels % g != 0) --g;
      return torch::nn::AnyModule(ChannelsLastNorm(channels, g));
    }
    case Norm::kNone: break;
  }
  return {};
}

// Kaiming normal for every convolution's weight (the only parameters of 4 or 5 dimensions: Conv3d,
// Conv2d and their transposes; norms hold 1-D ones), zero biases.
void init_weights(torch::nn::Module& module, double negative_slope) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    const auto params = m->named_parameters(/*recurse=*/false);
    const torch::Tensor* weight = params.find("weight");
    if (!weight || weight->dim() < 4) continue;
    torch::Tensor w = *weight;
    torch::nn::init::kaiming_normal_(w, negative_slope, torch::kFanIn, torch::kLeakyReLU);
    if (const torch::Tensor* bias = params.find("bias")) {
      torch::Tensor b = *bias;
      torch::nn::init::zeros_(b);
    }
  }
}

torch::Tensor activate(const torch::Tensor& y, Activation activation, double negative_slope) {
  switch (activation) {
    case Activation::kRelu: return torch::relu(y);
    case Activation::kLeakyRelu: return torch::leaky_relu(y, negative_slope);
    case Activation::kGelu: return torch::gelu(y);
    case Activation::kElu: return torch::elu(y);
  }
  return y;
}

}  // namespace

// nnU-Net's residual encoder: blocks per level, 1, 3, 4, 6, 6, 6, ... when model.blocks_per_level is empty.
int64_t residual_blocks(const ModelConfig& cfg, int64_t level) {
  static constexpr int64_t kNnUNet[] = {1, 3, 4, 6, 6, 6, 6, 6};
  if (!cfg.blocks_per_level.empty()) return cfg.blocks_per_level[static_cast<size_t>(level)];
  return kNnUNet[std::min<int64_t>(level, 7)];
}

ConvBlockImpl::ConvBlockImpl(int64_t in, int64_t out, const Shape3& stride, const ModelConfig& cfg,
                             ConvBlockShape shape)
    : activation_(cfg.activation), negative_slope_(cfg.negative_slope), activate_(shape.activate) {
  Shape3 k{}, pad{};
  for (size_t a = 0; a < 3; ++a) {
    k[a] = shape.kernel[a] > 0 ? shape.kernel[a] : cfg.kernel_size;
    pad[a] = k[a] / 2;
  }
  const bool bias = shape.bias.value_or(cfg.norm == Norm::kNone);
  conv_ = StageConv(cfg, ConvSpec{in, out, k, stride, pad, bias});
  register_module("conv", conv_.module());
  if (cfg.dropout > 0) dropout_ = register_module("dropout", torch::nn::Dropout3d(cfg.dropout));
  norm_ = make_norm(cfg.norm, out, cfg.norm_groups);
  if (!norm_.is_empty()) register_module("norm", norm_.ptr());
}

torch::Tensor ConvBlockImpl::forward(const torch::Tensor& x) {
  return after_conv(conv_(x));  // (N, out, D', H', W'), a Conv2d's output unsqueezed with model.dims 2
}

torch::Tensor ConvBlockImpl::forward_parts(const std::vector<torch::Tensor>& parts) {
  return after_conv(conv_.over_concat(parts));
}

torch::Tensor ConvBlockImpl::after_conv(torch::Tensor y) {
  if (dropout_) y = dropout_(y);
  const auto fused = activate_ ? fusable_activation(activation_) : std::optional(NormActivation::kNone);
  if (fused && !norm_.is_empty()) {  // norm + activation in one op (one pass each way with the fused kernels)
    if (auto* norm = norm_.ptr()->as<ChannelsLastNormImpl>()) return norm->forward_act(y, *fused, negative_slope_);
    if (auto* bn = norm_.ptr()->as<torch::nn::BatchNorm3dImpl>())
      return batch_norm_act(*bn, y, *fused, negative_slope_);
  }
  if (!norm_.is_empty()) y = apply_norm(norm_, y);
  return activate_ ? activate(y, activation_, negative_slope_) : y;
}

ResidualBlockImpl::ResidualBlockImpl(int64_t in, int64_t out, const Shape3& stride, const ModelConfig& cfg,
                                     const Shape3& kernel)
    : stride_(stride), activation_(cfg.activation), negative_slope_(cfg.negative_slope) {
  conv1_ = register_module("conv1", ConvBlock(in, out, stride, cfg, ConvBlockShape{kernel, /*bias=*/true}));
  conv2_ = register_module(
      "conv2", ConvBlock(out, out, /*stride=*/1, cfg, ConvBlockShape{kernel, /*bias=*/true, /*activate=*/false}));
  if (in != out) {
    project_ =
        register_module("project", ConvBlock(in, out, /*stride=*/1, cfg,
                                             ConvBlockShape{/*kernel=*/{1, 1, 1}, /*bias=*/false, /*activate=*/false}));
  }
  if (auto* norm = conv2_->norm()) {  // nnU-Net's init_last_bn_before_add_to_0 (init_weights leaves norms alone)
    torch::NoGradGuard no_grad;
    for (auto& p : norm->parameters()) p.zero_();
  }
}

torch::Tensor ResidualBlockImpl::forward(const torch::Tensor& x) {
  torch::Tensor skip =
      mean_pool3d(x, stride_, /*by_view=*/x.is_cuda() && at::globalContext().deterministicAlgorithms());
  if (project_) skip = project_(skip);
  return activate(conv2_(conv1_(x)) + skip, activation_, negative_slope_);
}

UNet3dImpl::UNet3dImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels)
    : levels_(cfg.levels),
      divisors_(patch_divisor(cfg)),
      output_activation_(cfg.output_activation),
      checkpointing_(cfg.activation_checkpointing),
      dropout_(cfg.dropout > 0) {
  const bool residual = cfg.architecture == Architecture::kResEncUNet;
  const std::optional<bool> bias = residual ? std::optional<bool>(true) : std::nullopt;  // nnU-Net's conv_bias
  for (int64_t l = 0; l < levels_; ++l) filters_.push_back(std::min(cfg.base_filters << l, cfg.max_filters));
  int64_t prev = in_channels;
  const Shape3 one = {1, 1, 1};
  for (int64_t l = 0; l < levels_; ++l) {
    torch::nn::Sequential stage;
    const Shape3 kernel = stage_kernel(cfg, l), stride = stage_stride(cfg, l);
    if (residual) {
      if (l == 0) {  // the stem
        stage->push_back(ConvBlock(prev, filters_[0], one, cfg, ConvBlockShape{kernel, /*bias=*/true}));
        prev = filters_[0];
      }
      for (int64_t b = 0; b < residual_blocks(cfg, l); ++b) {
        stage->push_back(ResidualBlock(b == 0 ? prev : filters_[l], filters_[l], b == 0 ? stride : one, cfg, kernel));
      }
    } else {
      for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
        stage->push_back(ConvBlock(c == 0 ? prev : filters_[l], filters_[l], c == 0 ? stride : one, cfg,
                                   ConvBlockShape{kernel, /*bias=*/std::nullopt}));
      }
    }
    encoder_.push_back(register_module(fmt::format("encoder{}", l), stage));
    prev = filters_[l];
  }
  for (int64_t l = levels_ - 2; l >= 0; --l) {
    const Shape3 up = stage_stride(cfg, l + 1);  // kernel = stride (nnU-Net's transpconv)
    up_.push_back(StageConv(cfg, ConvSpec{filters_[l + 1],
                                          filters_[l],
                                          up,
                                          up,
                                          {0, 0, 0},
                                          /*bias=*/true,
                                          /*transposed=*/true}));
    register_module(fmt::format("up{}", l), up_.back().module());
    torch::nn::Sequential stage;
    for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
      stage->push_back(ConvBlock(c == 0 ? 2 * filters_[l] : filters_[l], filters_[l], /*stride=*/1, cfg,
                                 ConvBlockShape{stage_kernel(cfg, l), bias}));
    }
    decoder_.push_back(register_module(fmt::format("decoder{}", l), stage));
  }
  const Shape3 pointwise = {1, 1, 1};
  head_ = StageConv(cfg, ConvSpec{filters_[0], out_channels, pointwise, pointwise, {0, 0, 0}, /*bias=*/true});
  register_module("head", head_.module());
  if (cfg.deep_supervision) {
    for (int64_t l = 1; l + 1 < levels_; ++l) {
      deep_heads_.push_back(
          StageConv(cfg, ConvSpec{filters_[l], out_channels, pointwise, pointwise, {0, 0, 0}, /*bias=*/true}));
      register_module(fmt::format("deep_head{}", l), deep_heads_.back().module());
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
  out.insert(out.end(), deep.rbegin(), deep.rend());  // (N, K, D / s_D(l), ...) for l = 1, 2, ...
  return out;
}

torch::Tensor UNet3dImpl::run_stage(torch::nn::Sequential& stage, const torch::Tensor& x, bool checkpoint) {
  if (!checkpoint || !is_training() || !torch::GradMode::is_enabled()) return stage->forward(x);
  torch::Tensor y = x;
  for (torch::nn::AnyModule& unit : *stage) {  // block by block: one block's activations at a time
    y = run_checkpointed(
        unit.ptr(), [unit](const torch::Tensor& t) mutable { return unit.forward<torch::Tensor>(t); }, y,
        /*preserve_rng=*/dropout_);
  }
  return y;
}

torch::Tensor UNet3dImpl::run(const torch::Tensor& x, std::vector<torch::Tensor>* deep) {
  const bool checkpoint_encoder = checkpointing_ != Checkpointing::kOff;
  const bool checkpoint_decoder = checkpointing_ == Checkpointing::kAll;
  std::vector<torch::Tensor> skips;  // (N, f_l, D / s_D(l), H / s_H(l), W / s_W(l)), s = stage_scale
  torch::Tensor y = x;
  for (int64_t l = 0; l < levels_; ++l) {
    y = run_stage(encoder_[static_cast<size_t>(l)], y, checkpoint_encoder);
    skips.push_back(y);
  }
  for (size_t i = 0; i < up_.size(); ++i) {
    const int64_t l = levels_ - 2 - static_cast<int64_t>(i);
    y = up_[i](y);
    const torch::Tensor& skip = skips[static_cast<size_t>(l)];
    if (split_concat_applies(split_concat_, y) &&
        !(checkpoint_decoder && is_training() && torch::GradMode::is_enabled())) {
      // The stage's first ConvBlock over (up, skip) without the concatenation, the rest as usual.
      torch::nn::Sequential& stage = decoder_[i];
      y = stage->ptr<ConvBlockImpl>(0)->forward_parts({y, skip});
      for (size_t b = 1; b < stage->size(); ++b) y = (*stage)[b]->as<ConvBlockImpl>()->forward(y);
    } else {
      y = run_stage(decoder_[i], torch::cat({y, skip}, /*dim=*/1), checkpoint_decoder);
    }
    if (deep && l >= 1 && static_cast<size_t>(l) <= deep_heads_.size()) {
      deep->push_back(deep_heads_[static_cast<size_t>(l - 1)](y));  // (N, K, D / s_D(l), ...)
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

int64_t count_parameters(const torch::nn::Module& module, bool trainable_only) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

namespace {

thread_local int64_t* conv_flops_sink = nullptr;  // the counter of the count_conv_flops() running here

int64_t shape_product(c10::IntArrayRef sizes, size_t from) {
  int64_t n = 1;
  for (size_t i = from; i < sizes.size(); ++i) n *= sizes[i];
  return n;
}

std::unique_ptr<at::ObserverContext> on_convolution(const at::RecordFunction& fn) {
  if (!conv_flops_sink || std::string_view(fn.name()) != "aten::convolution") return nullptr;
  // aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  const auto inputs = fn.inputs();
  if (inputs.size() < 9 || !inputs[0].isTensor() || !inputs[1].isTensor()) return nullptr;
  const auto& input = inputs[0].toTensor();   // (N, C_in, spatial...)
  const auto& weight = inputs[1].toTensor();  // (C_out, C_in / g, k...) or transposed (C_in, C_out / g, k...)
  const bool transposed = inputs[6].toBool();
  const size_t spatial = static_cast<size_t>(input.dim()) - 2;
  int64_t voxels = 1;  // output voxels (convolution) or input voxels (transposed): one weight pass each
  if (transposed) {
    voxels = shape_product(input.sizes(), 2);
  } else {
    const auto stride = inputs[3].toIntVector(), padding = inputs[4].toIntVector(), dilation = inputs[5].toIntVector();
    auto at = [](const std::vector<int64_t>& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; };
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t n = input.size(static_cast<int64_t>(i) + 2), k = weight.size(static_cast<int64_t>(i) + 2);
      voxels *= (n + 2 * at(padding, i) - at(dilation, i) * (k - 1) - 1) / at(stride, i) + 1;
    }
  }
  *conv_flops_sink += 2 * input.size(0) * voxels * weight.numel();
  return nullptr;
}

}  // namespace

int64_t count_conv_flops(const std::function<void()>& run) {
  int64_t flops = 0;
  int64_t* const outer = conv_flops_sink;
  conv_flops_sink = &flops;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_convolution).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    run();
  } catch (...) {
    at::removeCallback(handle);
    conv_flops_sink = outer;
    throw;
  }
  at::removeCallback(handle);
  conv_flops_sink = outer;
  return flops;
}

int64_t forward_flops(NetworkImpl& net, const Shape3& patch, int64_t in_channels) {
  const Shape3 divisor = net.size_divisors();
  Shape3 probe = patch;
  int64_t scale = 1;
  if (patch[0] % divisor[0] == 0 && patch[1] % divisor[1] == 0 && patch[2] % divisor[2] == 0) {
    probe = divisor;
    scale = (patch[0] / divisor[0]) * (patch[1] / divisor[1]) * (patch[2] / divisor[2]);
  }
  const auto params = net.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const bool was_training = net.is_training();
  net.eval();  // batch-norm statistics untouched
  int64_t flops = 0;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor x =
        torch::zeros({1, in_channels, probe[0], probe[1], probe[2]}, torch::TensorOptions().device(device));
    flops = count_conv_flops([&] { (void)net.forward(x); });
  }
  net.train(was_training);
  return flops * scale;
}

}  // namespace u3d
