// Training losses. Shapes: output (N, K, D, H, W); regression target (N, 1, D, H, W) float;
// segmentation target (N, D, H, W) int64 labels; mask (N, 1, D, H, W) float {0, 1} or undefined.
// Call these qualified (u3d::l1_loss): unqualified calls also find ATen's namesakes by ADL.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>

#include "u3d/config.h"
#include "u3d/dataset.h"

namespace u3d {

torch::Tensor l1_loss(const torch::Tensor& pred, const torch::Tensor& target);
// Mean |pred - target| over the voxels where mask = 1 (0 when the mask is empty).
torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);
torch::Tensor mse_loss(const torch::Tensor& pred, const torch::Tensor& target);
torch::Tensor masked_mse_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);
// 1 - mean soft Dice of the foreground classes (1..K-1), per sample then averaged:
// dice_k = (2 sum(p_k y_k) + smooth) / (sum(p_k) + sum(y_k) + smooth), p = softmax(logits).
torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, double smooth = 1e-5);
torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// cross_entropy_loss + soft_dice_loss (nnU-Net's default).
torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// auto -> a concrete kind for the task; ConfigError for a kind that does not fit the task or data.
LossKind resolve_loss(LossKind kind, Task task, bool has_mask);

class Loss {
 public:
  explicit Loss(LossKind kind) : kind_(kind) {}
  torch::Tensor operator()(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask) const;
  LossKind kind() const { return kind_; }

 private:
  LossKind kind_;
};

}  // namespace u3d
