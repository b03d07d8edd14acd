#include "u3d/evaluate/metrics.h"

#include <cmath>
#include <limits>

namespace u3d {

double masked_mae(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto err = (pred.to(torch::kDouble) - target.to(torch::kDouble)).abs();
  if (!mask.defined()) return err.mean().item<double>();
  const auto m = mask.reshape(err.sizes()).to(torch::kBool);
  const int64_t n = m.sum().item<int64_t>();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  return err.masked_select(m).sum().item<double>() / static_cast<double>(n);
}

std::vector<double> dice_per_class(const torch::Tensor& pred, const torch::Tensor& labels, int64_t num_classes) {
  std::vector<double> out;
  for (int64_t k = 1; k < num_classes; ++k) {
    const auto p = pred == k;
    const auto y = labels == k;
    const double inter = static_cast<double>((p & y).sum().item<int64_t>());
    const double total = static_cast<double>(p.sum().item<int64_t>() + y.sum().item<int64_t>());
    out.push_back(total == 0 ? std::numeric_limits<double>::quiet_NaN() : 2.0 * inter / total);
  }
  return out;
}

double nan_mean(const std::vector<double>& values) {
  double sum = 0;
  int64_t n = 0;
  for (double v : values) {
    if (std::isfinite(v)) {
      sum += v;
      ++n;
    }
  }
  return n > 0 ? sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
}

TaskMetric task_metric(Task task) {
  return task == Task::kSegmentation ? TaskMetric{"val_dice", true} : TaskMetric{"val_mae", false};
}

bool is_improvement(double candidate, double best, bool higher_is_better) {
  if (!std::isfinite(candidate)) return false;
  if (!std::isfinite(best)) return true;
  return higher_is_better ? candidate > best : candidate < best;
}

}  // namespace u3d
