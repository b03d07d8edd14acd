#include "u3d/evaluate/metrics.h"

#include <cmath>
#include <limits>

namespace u3d {

double masked_mae(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask) {
  return masked_mae_tensor(pred, target, mask).item<double>();
}

torch::Tensor masked_mae_tensor(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask) {
  const auto err = (pred.to(torch::kDouble) - target.to(torch::kDouble)).abs();
  if (!mask.defined()) return err.mean();
  const auto m = mask.reshape(err.sizes()).to(torch::kBool);
  const torch::Tensor n = m.sum();  // () int64
  // masked_select's size is data-dependent (a device sync on CUDA): a where() there; the CPU keeps
  // masked_select's summation order.
  const torch::Tensor sum = err.is_cuda() ? torch::where(m, err, 0.0).sum() : err.masked_select(m).sum();
  return torch::where(n > 0, sum / n, std::numeric_limits<double>::quiet_NaN());
}

std::vector<double> dice_per_class(const torch::Tensor& pred, const torch::Tensor& labels, int64_t num_classes) {
  const torch::Tensor dice = dice_per_class_tensor(pred, labels, num_classes).cpu();
  return std::vector<double>(dice.data_ptr<double>(), dice.data_ptr<double>() + dice.numel());
}

torch::Tensor dice_per_class_tensor(const torch::Tensor& pred, const torch::Tensor& labels, int64_t num_classes) {
  std::vector<torch::Tensor> out;
  for (int64_t k = 1; k < num_classes; ++k) {
    const auto p = pred == k;
    const auto y = labels == k;
    const auto inter = (p & y).sum().to(torch::kDouble);
    const auto total = (p.sum() + y.sum()).to(torch::kDouble);
    out.push_back(torch::where(total == 0, std::numeric_limits<double>::quiet_NaN(), 2.0 * inter / total));
  }
  if (out.empty()) return torch::empty({0}, torch::TensorOptions().dtype(torch::kDouble).device(pred.device()));
  return torch::stack(out);
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
