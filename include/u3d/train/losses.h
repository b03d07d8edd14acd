// Training losses. Shapes: output (N, K, D, H, W); regression target (N, 1, D, H, W) float;
// segmentation target (N, D, H, W) int64 labels; mask (N, 1, D, H, W) float {0, 1} or undefined.
// Call these qualified (u3d::l1_loss): unqualified calls also find ATen's namesakes by ADL.
#pragma once
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>

#include "u3d/core/config.h"
#include "u3d/io/dataset.h"

namespace u3d {

torch::Tensor l1_loss(const torch::Tensor& pred, const torch::Tensor& target);
// Mean |pred - target| over the voxels where mask = 1 (0 when the mask is empty).
torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);
torch::Tensor mse_loss(const torch::Tensor& pred, const torch::Tensor& target);
torch::Tensor masked_mse_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);
// 1 - mean soft Dice of the foreground classes (1..K-1), per sample then averaged:
// dice_k = (2 sum(p_k y_k) + smooth) / (sum(p_k) + sum(y_k) + smooth), p = softmax(logits).
torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, double smooth = 1e-5);
// Mean cross-entropy of logits (N, K, ...) against int64 labels (N, ...), in float32. On CUDA with
// deterministic algorithms on (training.deterministic), cross_entropy_loss_deterministic(): ATen's
// nll_loss2d, which F.cross_entropy uses for 5-D input, has no deterministic CUDA kernel.
torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// The same value as log_softmax and a one-hot product (element-wise backward, no atomics, no host
// read: one_hot with K classes does not check the labels on CUDA).
torch::Tensor cross_entropy_loss_deterministic(const torch::Tensor& logits, const torch::Tensor& labels);
// cross_entropy_loss + soft_dice_loss (nnU-Net's default).
torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// auto -> a concrete kind for the task; ConfigError for a kind that does not fit the task or data.
LossKind resolve_loss(LossKind kind, Task task, bool has_mask);

// Deep supervision (nnU-Net): weights of `outputs` outputs, full resolution first: 1, 1/2, 1/4, ...,
// the lowest-resolution output set to 0 when there are two or more, normalised to sum 1.
std::vector<double> deep_supervision_weights(int64_t outputs);
// Labels (N, D, H, W) down-sampled by an integer factor per spatial axis by nearest neighbour, as
// nnU-Net does (F.interpolate mode nearest-exact: output voxel o takes input voxel f * o + f / 2).
torch::Tensor downsample_labels(const torch::Tensor& labels, const std::array<int64_t, 3>& factor);

class Loss;
// sum_i weights[i] * loss(outputs[i], labels down-sampled to outputs[i]); outputs (N, K, ...) finest
// first; zero weights are skipped.
torch::Tensor deep_supervision_loss(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                    const torch::Tensor& labels, const std::vector<double>& weights);

class Loss {
 public:
  explicit Loss(LossKind kind) : kind_(kind) {}
  torch::Tensor operator()(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask) const;
  LossKind kind() const { return kind_; }

 private:
  LossKind kind_;
};

}  // namespace u3d
