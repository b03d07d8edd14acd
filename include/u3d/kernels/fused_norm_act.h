// Normalisation + activation in one CUDA pass each way, on channels-last tensors: the project's own
// kernels (src/kernels/norm_act.cu, arithmetic in kernels/norm_act_math.h), used by the networks'
// norm layers when model.fused_kernels is on (model/fused_kernels.h) and never on the CPU path.
//
//   x      (N, C, D, H, W) in ChannelsLast3d (NDHWC memory), CUDA, float32 | float16 | bfloat16
//   weight, bias (C) float32, the norm's affine parameters (gradients returned for both)
//   y      (N, C, D, H, W) ChannelsLast3d in x's dtype: act((x - mean) * rstd * weight + bias)
//   statistics in float32 per unit: batch norm one per channel over N x D x H x W (training
//          statistics; running_mean / running_var (C) float32 updated in place with `momentum` as
//          torch::nn::BatchNorm3d does, unbiased variance), group norm one per (sample, group) over
//          C / groups channels and every voxel (instance norm: groups = C); biased variance, eps
//          inside the square root, as ATen
//   act    none | relu | leaky_relu(negative_slope), the norm's output activation
//
// Passes: forward reads x twice (moments, then the scale-shift-activation) and writes y once;
// backward saves only x and per-channel float32 tables, recomputes the activation's mask from x, reads
// dy and x twice and writes dx once. Every reduction has a fixed order (deterministic); no host reads
// and no allocations other than ATen's caching allocator, so the op can be captured in a CUDA graph.
//
// Without CUDA kernels in the build (built() false) the entry points throw a TrainingError; applies()
// is false for every tensor the kernels do not take (CPU, other layouts or dtypes, channels above 1024),
// which then take ATen (model/channels_last_norm.h, model/channels_last_batch_norm.h).
#pragma once
#include <torch/torch.h>

#include <string>

namespace u3d::kernels {

// Whether this library was compiled with its CUDA kernels.
bool built();

// The GPU code compiled in, e.g. "sm_80 sm_90 sm_100 + compute_100 PTX"; empty without kernels.
std::string architectures();

// The compute capability of a CUDA device as "sm_90"; "" for a CPU device or without kernels.
std::string device_architecture(const torch::Device& device);

// The activation fused after the norm, as norm_act_math.h's slope: relu 0, leaky_relu its slope, none 1.
struct FusedActivation {
  double slope = 1.0;
  static FusedActivation none() { return {1.0}; }
  static FusedActivation relu() { return {0.0}; }
  static FusedActivation leaky_relu(double negative_slope) { return {negative_slope}; }
};

// True when the kernels take x with these parameters (whatever enabled() says): built, x a 5-D CUDA ChannelsLast3d
// tensor (not also contiguous) of float32/float16/bfloat16, C <= 1024, weight and bias defined float32
// (C) on x's device.
bool applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// Group (instance: groups = C) norm + activation with training statistics; differentiable in x,
// weight and bias.
torch::Tensor group_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             int64_t groups, double eps, FusedActivation act);

// Batch norm + activation with training statistics; running_mean and running_var (C) float32, or
// undefined not to track them, updated in place by `momentum`; differentiable in x, weight and bias.
torch::Tensor batch_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const torch::Tensor& running_mean, const torch::Tensor& running_var, double momentum,
                             double eps, FusedActivation act);

}  // namespace u3d::kernels
