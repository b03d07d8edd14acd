// Dice + cross-entropy (softmax head) and BCE + Dice (sigmoid head) in one CUDA pass each way: the
// project's own kernels (src/kernels/loss.cu, per-voxel arithmetic in kernels/loss_math.h), used by
// the training loss (train/losses.h, Loss::parts) when model.fused_kernels is on and never on the
// CPU path. They read each voxel's logits and label once and write a small table of sums; the losses
// are then composed from the table in ATen (autograd does the rest), so neither the softmax nor the
// one-hot labels are ever written out, and no (N, K, D, H, W) copy of the logits is made.
//
//   logits  (N, C, D, H, W) in ChannelsLast3d (NDHWC memory) or contiguous (NCDHW), or (N, C, H, W)
//           in ChannelsLast or contiguous; CUDA, float32 | float16 | bfloat16; arithmetic in float32.
//           Softmax head: C = K classes (2 <= K <= kMaxLossChannels, loss_math.h), p = softmax over C.
//           Sigmoid head: C = K - 1 channels (1 <= C <= kMaxLossChannels), channel c is label c + 1,
//           p = sigmoid(x).
//   labels  (N, D, H, W) (or (N, H, W)) int64, contiguous, on the logits' device; a label outside the
//           classes is a voxel with no target (loss_math.h; not checked: no host reads)
//   sums    RegionSums below, float32: ce differentiable, inter and psum differentiable in the logits,
//           ysum without gradient; the gradient returned is in the logits' shape, dtype and layout
//
// Every reduction has a fixed order (deterministic, run to run on one GPU); no host reads and no
// allocations other than ATen's caching allocator, so the ops can be captured in a CUDA graph.
// Without CUDA kernels in the build (built(), fused_norm_act.h) the entry points throw a
// TrainingError; loss_applies() is false for every input the kernels do not take.
#pragma once
#include <torch/torch.h>

#include "u3d/core/config.h"

namespace u3d::kernels {

struct RegionSums {
  torch::Tensor ce;     // () sum over the voxels of logsumexp(x) - x_label (sigmoid: of each channel's BCE)
  torch::Tensor inter;  // (N, C) sum over a sample's voxels of p_c y_c
  torch::Tensor psum;   // (N, C) sum of p_c
  torch::Tensor ysum;   // (N, C) sum of y_c (voxels of the class), no gradient
};

// True when the kernels take these inputs for the head (whatever enabled() says): built, logits and
// labels as above, N <= 65535.
bool loss_applies(const torch::Tensor& logits, const torch::Tensor& labels, Head head);

// Softmax head: y_k = [label == k]. cross_entropy_loss = ce / (N x D x H x W); soft_dice_loss from
// inter, psum + ysum (train/losses.h).
RegionSums softmax_ce_dice_sums(const torch::Tensor& logits, const torch::Tensor& labels);

// Sigmoid head: y_c = [label == c + 1]. sigmoid_bce_loss = ce / (N x C x D x H x W); sigmoid_dice_loss
// from inter, psum + ysum.
RegionSums sigmoid_bce_dice_sums(const torch::Tensor& logits, const torch::Tensor& labels);

}  // namespace u3d::kernels
