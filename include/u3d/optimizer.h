// Optimizer construction from the config and learning-rate updates.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "u3d/config.h"

namespace u3d {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingConfig& cfg,
                                                        const std::vector<torch::Tensor>& params);
// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace u3d
