// Batch norm (model.norm batch) on channels-last 3D tensors, run by ATen's channels-last kernels.
//
// ATen's own CUDA batch norm (the path for bf16, which its cuDNN path refuses, and whenever cuDNN is
// off) has channels-last kernels for 4-D ChannelsLast inputs only: a ChannelsLast3d (NDHWC) input
// takes its general path, a Welford var_mean reduction plus strided element-wise kernels. That was
// half of the 2D U-Net's bf16 step on an H100 (docs/performance.md, "Profile of the 2D step").
// An NDHWC tensor is also an NHWC one, and batch norm's statistics (per channel, over the batch and
// every voxel) do not depend on how the voxels are grouped:
//
//   x     (N, C, D, H, W), ChannelsLast3d, any float dtype (bf16/fp16 under autocast)
//   view  (N, C, D * H, W), ChannelsLast: a view, no copy
//   y     = at::batch_norm(view, ...) viewed back to (N, C, D, H, W), ChannelsLast3d
//
// With model.dims 2 (D = 1 on the default slice axis) the view is the slice batch itself, as
// PyTorch's BatchNorm2d would see it. Running statistics, momentum (including the cumulative average
// when momentum is unset) and num_batches_tracked follow torch::nn::BatchNorm3d's forward; inputs
// that are not channels-last 5-D tensors (contiguous NCDHW, the CPU default) take that forward
// unchanged. The module stays a torch::nn::BatchNorm3d: parameter and buffer names, checkpoints and
// exports are those of the plain module.
#pragma once
#include <torch/torch.h>

#include "u3d/model/channels_last_norm.h"

namespace u3d {

// bn(x) with x viewed as 4-D ChannelsLast when x is ChannelsLast3d (and not also contiguous).
torch::Tensor channels_last_batch_norm(torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x);

// bn(x) then the activation, in one pass each way through kernels/fused_norm_act.h when the fused
// kernels are enabled (model.fused_kernels), bn is training with affine parameters and x is a tensor
// they take; else channels_last_batch_norm then the activation's ATen op, as before. Running
// statistics, momentum and num_batches_tracked follow channels_last_batch_norm either way.
// Whether batch_norm_act takes the fused kernels for bn and x.
bool batch_norm_act_fuses(const torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x);

torch::Tensor batch_norm_act(torch::nn::BatchNorm3dImpl& bn, const torch::Tensor& x, NormActivation activation,
                             double negative_slope);

// A block's norm module applied to x: channels_last_batch_norm for a BatchNorm3d, the module's own
// forward for any other (instance and group norm keep their layout themselves, model/channels_last_norm.h).
torch::Tensor apply_norm(torch::nn::AnyModule& norm, const torch::Tensor& x);

}  // namespace u3d
