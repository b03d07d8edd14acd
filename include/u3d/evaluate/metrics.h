// Evaluation metrics, in the units of the data (Gy for dose; Dice in [0, 1]).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/io/h5/dataset.h"

namespace u3d {

// Mean |pred - target| over voxels where mask != 0 (every voxel when mask is undefined).
// pred, target: (D, H, W) float; mask: (D, H, W) or (1, D, H, W).
double masked_mae(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);
// The same as a () float64 tensor on pred's device, NaN for an empty mask; no host read (validation
// stacks the cases' values and reads them once).
torch::Tensor masked_mae_tensor(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask);

// Dice of each foreground class 1..K-1 between two label volumes (D, H, W). A class absent from
// both gives NaN (left out of means), a class in only one gives 0.
std::vector<double> dice_per_class(const torch::Tensor& pred, const torch::Tensor& labels, int64_t num_classes);
// The same as a (K-1,) float64 tensor on pred's device; no host read.
torch::Tensor dice_per_class_tensor(const torch::Tensor& pred, const torch::Tensor& labels, int64_t num_classes);
// Mean over the finite values; NaN when there are none.
double nan_mean(const std::vector<double>& values);

// The task's validation metric: "val_mae" (lower is better) or "val_dice" (higher is better).
struct TaskMetric {
  std::string name;
  bool higher_is_better;
};
TaskMetric task_metric(Task task);
// Whether `candidate` improves on `best` (a NaN candidate never does; anything beats a NaN best).
bool is_improvement(double candidate, double best, bool higher_is_better);

}  // namespace u3d
