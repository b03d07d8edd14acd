#include "u3d/losses.h"

#include "u3d/errors.h"

namespace u3d {

torch::Tensor l1_loss(const torch::Tensor& pred, const torch::Tensor& target) { return (pred - target).abs().mean(); }

torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto m = mask.to(pred.scalar_type());
  return ((pred - target).abs() * m).sum() / m.sum().clamp_min(1.0);
}

torch::Tensor mse_loss(const torch::Tensor& pred, const torch::Tensor& target) {
  return (pred - target).square().mean();
}

torch::Tensor masked_mse_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto m = mask.to(pred.scalar_type());
  return ((pred - target).square() * m).sum() / m.sum().clamp_min(1.0);
}

torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, double smooth) {
  const int64_t k = logits.size(1);
  const auto probs = torch::softmax(logits.to(torch::kFloat), /*dim=*/1);            // (N, K, ...)
  const auto onehot = torch::one_hot(labels, k).movedim(-1, 1).to(torch::kFloat);      // (N, K, ...)
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < logits.dim(); ++d) spatial.push_back(d);
  const auto inter = (probs * onehot).sum(spatial);                                    // (N, K)
  const auto denom = probs.sum(spatial) + onehot.sum(spatial);                         // (N, K)
  const auto dice = (2.0 * inter + smooth) / (denom + smooth);
  return 1.0 - dice.slice(/*dim=*/1, /*start=*/1).mean();
}

torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return u3d::cross_entropy_loss(logits, labels) + u3d::soft_dice_loss(logits, labels);
}

LossKind resolve_loss(LossKind kind, Task task, bool has_mask) {
  if (kind == LossKind::kAuto) {
    if (task == Task::kSegmentation) return LossKind::kDiceCe;
    return has_mask ? LossKind::kMaskedL1 : LossKind::kL1;
  }
  const bool seg_loss = kind == LossKind::kDiceCe || kind == LossKind::kCe;
  if (seg_loss != (task == Task::kSegmentation)) {
    throw ConfigError(fmt::format("training.loss: {} does not fit a {} dataset; use {}", to_string(kind),
                                  to_string(task),
                                  task == Task::kSegmentation ? "dice_ce|ce" : "l1|masked_l1|mse|masked_mse"));
  }
  if ((kind == LossKind::kMaskedL1 || kind == LossKind::kMaskedMse) && !has_mask) {
    throw ConfigError(fmt::format("training.loss: {} needs a loss mask, but the training cases have none",
                                  to_string(kind)));
  }
  return kind;
}

torch::Tensor Loss::operator()(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask) const {
  switch (kind_) {
    case LossKind::kL1: return u3d::l1_loss(output, target);
    case LossKind::kMaskedL1: return u3d::masked_l1_loss(output, target, mask);
    case LossKind::kMse: return u3d::mse_loss(output, target);
    case LossKind::kMaskedMse: return u3d::masked_mse_loss(output, target, mask);
    case LossKind::kDiceCe: return u3d::dice_ce_loss(output, target);
    case LossKind::kCe: return u3d::cross_entropy_loss(output, target);
    case LossKind::kAuto: break;
  }
  throw ConfigError("training.loss: auto must be resolved before use");
}

}  // namespace u3d
