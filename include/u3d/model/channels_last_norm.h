// Instance and group norm that keep the channels-last 3D layout (NDHWC), with the activation after
// them fused into the same pass.
//
// at::instance_norm reshapes its input to (1, N * C, D, H, W) and at::group_norm to (N, G, ...),
// neither a view of an NDHWC tensor, so both make their input contiguous (NCDHW) and their output
// follows: in a channels-last network every block would convert layout twice per pass. Here the
// statistics are reductions over the spatial axis of the channels-last view, and the output is one
// scale-shift(-activation) pass written straight into an NDHWC tensor:
//
//   x    (N, C, D, H, W) in ChannelsLast3d, any float dtype (bf16/fp16 under autocast)
//   view (N, S, G, C / G), S = D * H * W: a view, no copy (instance norm: G = C)
//   mean, rstd per (n, g) in float32: Welford (var_mean) for float32 inputs; for bf16/fp16 the
//        float32-accumulated E[x] and E[x^2] (no float32 copy of the input), var clamped at 0
//   y    = act(x * scale + shift), scale = rstd * weight, shift = bias - mean * scale, computed in
//        float32 and written in x's dtype, NDHWC; act: none, relu or leaky_relu
//
// Backward is a custom autograd function (ChannelsLastNormFunction in the .cpp) with the closed
// form: g = act'(y) * dy; per (n, g) sums of g and g * x (float32 accumulation); dx = g * scale +
// x * k1 + k0; dweight, dbias summed over the batch. It saves x and y, as at::instance_norm + relu
// do. No host reads and no shape-dependent branches on values: it can be captured in a CUDA graph.
//
// With the fused kernels enabled (model.fused_kernels, model/fused_kernels.h), channels-last CUDA
// inputs they take run in kernels/fused_norm_act.h's one-pass kernels instead of this composition.
//
// Inputs that are not channels-last 5D tensors (the CPU default, prediction in NCDHW, TorchScript
// export) take at::instance_norm / at::group_norm and the activation op, bit for bit the plain
// modules' computation. Parameters: weight (C) = 1, bias (C) = 0, float32, the names and shapes of
// torch::nn::InstanceNorm3d(affine) and GroupNorm; no buffers.
#pragma once
#include <torch/torch.h>

#include "u3d/core/config.h"
#include "u3d/kernels/fused_norm_act.h"

namespace u3d {

// The activation fused after the norm.
enum class NormActivation { kNone, kRelu, kLeakyRelu };

// The fused op: act(norm(x) * weight + bias) with `groups` groups (groups <= 0: instance norm, one
// group per channel).
// x (N, C, D, H, W); weight, bias (C) float32. Channels-last inputs take the layout-keeping path,
// others at::instance_norm / at::group_norm. `negative_slope` for kLeakyRelu.
torch::Tensor channels_last_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 int64_t groups, double eps, NormActivation activation = NormActivation::kNone,
                                 double negative_slope = 0.01);

// The layout-keeping path whatever the layout (tests; x is made channels-last first).
torch::Tensor channels_last_norm_kernel(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        int64_t groups, double eps, NormActivation activation, double negative_slope);

// model.norm instance (groups = 0) or group (groups > 0, dividing C): a module with weight and bias (C)
// whose forward is channels_last_norm; forward_act fuses an activation.
class ChannelsLastNormImpl : public torch::nn::Module {
 public:
  ChannelsLastNormImpl(int64_t channels, int64_t groups, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x) { return forward_act(x, NormActivation::kNone, 0.0); }
  torch::Tensor forward_act(const torch::Tensor& x, NormActivation activation, double negative_slope);
  int64_t groups() const { return groups_; }

  torch::Tensor weight, bias;

 private:
  int64_t channels_;
  int64_t groups_;  // 0: instance norm
  double eps_;
};
TORCH_MODULE(ChannelsLastNorm);

// `t` (5-D) in ChannelsLast3d with the canonical NDHWC strides (C*D*H*W, 1, C*H*W, C*W, C) also where
// the layout is ambiguous: with C == 1 (the first convolution's weight, a 1-channel input),
// contiguous(ChannelsLast3d) keeps the NCDHW strides, the convolution then picks NCDHW and every
// layer after it would convert back. A 4-D tensor (a 2D U-Net's weight, model/stage_conv.h) gets
// ChannelsLast's (C*H*W, 1, C*W, C) the same way; tensors of another rank are returned unchanged.
torch::Tensor strictly_channels_last(const torch::Tensor& t);

// The activation's ATen op on y (relu, leaky_relu, or y itself for kNone).
torch::Tensor apply_activation(const torch::Tensor& y, NormActivation activation, double negative_slope);

// The activation as the fused kernels take it (kernels/fused_norm_act.h).
kernels::FusedActivation fused_activation(NormActivation activation, double negative_slope);

// The NormActivation for a model.activation, or nullopt when it cannot be fused (gelu, elu).
std::optional<NormActivation> fusable_activation(Activation activation);

}  // namespace u3d
