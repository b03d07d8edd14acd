// A convolution over a channel concatenation without the concatenation (issue 53): what a U-Net
// decoder stage computes as conv(cat({up, skip}, 1)), as a sum of one convolution per part.
//
//   conv_over_concat(conv, {p_0, ..., p_{k-1}}) == conv(torch::cat({p_0, ..., p_{k-1}}, /*dim=*/1))
//
//   parts    p_i: (N, c_i, D, H, W) for Conv3d / ConvTranspose3d, (N, c_i, H, W) for the 2D forms;
//            the same batch, spatial size, dtype and device; sum of c_i = the convolution's in_channels.
//   result   (N, out, D', H', W') (or (N, out, H', W')): the module's own output shape.
//
// The weight is split along its input channels, weight (out, in, k...) for a convolution and
// (in, out, k...) for a transposed one: part i uses the view weight.narrow(in-axis, c_0 + ... +
// c_{i-1}, c_i) of the module's parameter (no copy of the parameter; its gradient is the gradients
// of the views, summed by autograd into the one parameter). Part 0's convolution carries the bias;
// each further part's output is added into it in place (convolution's backward keeps its input and
// weight, never its output, so the in-place sum is autograd-safe). Stride, padding, dilation and
// output padding are the module's (groups 1 and zero padding mode only: what the networks use).
// Same parameters, same names, same checkpoints as the module called on the concatenation.
//
// Layout: the output takes the first part's memory format (channels-last parts give a
// channels-last output, as cat + conv does); the sum keeps it.
//
// When it pays: on a GPU, where the concatenation is a memory-bound copy, a full read and write of
// every part per decoder stage (and its backward, a split of the gradient), and the convolutions are
// fast. The price is k convolutions of c_i input channels instead of one of sum c_i, which some
// kernels run less efficiently than one wide one, and a sum of k outputs; on the CPU the copy is
// cheap next to the convolution. Numerically equal to conv(cat(parts)) within the precision's
// rounding, not bit for bit: the reduction over input channels is summed in another order. The
// networks keep it behind a switch that defaults off (UNet3dImpl, MlperfUNet3dImpl and
// OpenKbpBaselineImpl::set_split_concat), so the default path is unchanged to the bit.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace u3d {

// Whether a network splits its decoder's concatenations: when it was asked to (set_split_concat), or
// when the fused kernels are enabled (model.fused_kernels, kernels/fused_norm_act.h) and the decoder's
// tensor `x` is on CUDA. The CPU path stays the concatenation, bit for bit.
bool split_concat_applies(bool asked, const torch::Tensor& x);

torch::Tensor conv_over_concat(const torch::nn::Conv3dImpl& conv, const std::vector<torch::Tensor>& parts);
torch::Tensor conv_over_concat(const torch::nn::Conv2dImpl& conv, const std::vector<torch::Tensor>& parts);
torch::Tensor conv_over_concat(const torch::nn::ConvTranspose3dImpl& conv, const std::vector<torch::Tensor>& parts);
torch::Tensor conv_over_concat(const torch::nn::ConvTranspose2dImpl& conv, const std::vector<torch::Tensor>& parts);

}  // namespace u3d
