#include "u3d/optimizer.h"

namespace u3d {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainingConfig& cfg,
                                                        const std::vector<torch::Tensor>& params) {
  const auto betas = std::make_tuple(cfg.betas[0], cfg.betas[1]);
  switch (cfg.optimizer) {
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(cfg.lr).betas(betas).weight_decay(cfg.weight_decay));
    case OptimizerKind::kAdamW:
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(cfg.lr).betas(betas).weight_decay(cfg.weight_decay));
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(cfg.lr)
                                                             .momentum(cfg.momentum)
                                                             .nesterov(cfg.nesterov && cfg.momentum > 0)
                                                             .weight_decay(cfg.weight_decay));
  }
  return nullptr;
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace u3d
