#include "u3d/train/losses.h"

#include "u3d/core/errors.h"

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
  const auto probs = torch::softmax(logits.to(torch::kFloat), /*dim=*/1);          // (N, K, ...)
  const auto onehot = torch::one_hot(labels, k).movedim(-1, 1).to(torch::kFloat);  // (N, K, ...)
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < logits.dim(); ++d) spatial.push_back(d);
  const auto inter = (probs * onehot).sum(spatial);             // (N, K)
  const auto denom = probs.sum(spatial) + onehot.sum(spatial);  // (N, K)
  const auto dice = (2.0 * inter + smooth) / (denom + smooth);
  return 1.0 - dice.slice(/*dim=*/1, /*start=*/1).mean();
}

torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  if (logits.is_cuda() && at::globalContext().deterministicAlgorithms()) {
    return cross_entropy_loss_deterministic(logits, labels);
  }
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

torch::Tensor cross_entropy_loss_deterministic(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t k = logits.size(1);
  const torch::Tensor log_p = torch::log_softmax(logits.to(torch::kFloat), /*dim=*/1);      // (N, K, ...)
  const torch::Tensor onehot = torch::one_hot(labels, k).movedim(-1, 1).to(torch::kFloat);  // (N, K, ...)
  return -(log_p * onehot).sum(/*dim=*/1).mean();
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
    throw ConfigError(
        fmt::format("training.loss: {} needs a loss mask, but the training cases have none", to_string(kind)));
  }
  return kind;
}

std::vector<double> deep_supervision_weights(int64_t outputs) {
  std::vector<double> w;
  for (int64_t i = 0; i < outputs; ++i) w.push_back(1.0 / static_cast<double>(int64_t{1} << i));
  if (outputs >= 2) w.back() = 0.0;
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v /= sum;
  return w;
}

torch::Tensor downsample_labels(const torch::Tensor& labels, const std::array<int64_t, 3>& factor) {
  torch::Tensor out = labels;
  const int64_t first = labels.dim() - 3;  // spatial axes are the last three
  for (int a = 0; a < 3; ++a) {
    const int64_t f = factor[static_cast<size_t>(a)];
    if (f > 1) out = out.slice(first + a, /*start=*/f / 2, /*end=*/c10::nullopt, /*step=*/f);
  }
  return out.contiguous();
}

torch::Tensor deep_supervision_loss(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                    const torch::Tensor& labels, const std::vector<double>& weights) {
  if (outputs.size() != weights.size()) {
    throw ConfigError(fmt::format("deep supervision: {} outputs but {} weights", outputs.size(), weights.size()));
  }
  torch::Tensor total;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (weights[i] == 0) continue;
    std::array<int64_t, 3> factor{};
    for (int a = 0; a < 3; ++a)
      factor[static_cast<size_t>(a)] = labels.size(labels.dim() - 3 + a) / outputs[i].size(2 + a);
    const torch::Tensor term = loss(outputs[i], downsample_labels(labels, factor), torch::Tensor()) * weights[i];
    total = total.defined() ? total + term : term;
  }
  return total;
}

torch::Tensor Loss::operator()(const torch::Tensor& output, const torch::Tensor& target,
                               const torch::Tensor& mask) const {
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
