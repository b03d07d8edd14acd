// A training step on the CPU over a fresh network, the set-up the training-step tests (unit/train/)
// share: the network, its loss, optimizer and step monitor, and the TrainStep over them.
#pragma once
#include <torch/torch.h>

#include <functional>

#include "u3d/core/config.h"
#include "u3d/model/unet.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/train_step.h"

namespace u3d::test {

// The network of `config` (2 input channels, 1 output) built after torch::manual_seed(5) and handed
// to `prepare` (e.g. a layout change) before anything else sees it; Loss(`loss_kind`); the optimizer
// at the config's learning rate; a CPU StepMonitor, which the step reports to when `monitored`; and
// the TrainStep over them on the CPU. Tests bind the members by name:
// `auto& [cfg, net, loss, opt, monitor, step] = cpu_step;`.
struct CpuStep {
  CpuStep(const Config& config, LossKind loss_kind, bool monitored,
          const std::function<void(Network&)>& prepare = nullptr)
      : cfg(config),
        net(seeded_network(cfg, prepare)),
        loss(loss_kind),
        opt(cfg.training, net->parameters()),
        monitor(torch::kCPU),
        step(at_learning_rate(opt, cfg), torch::kCPU, *net, loss, opt, monitored ? &monitor : nullptr) {}

  Config cfg;  // the step keeps a reference to it
  Network net;
  const Loss loss;
  Optimizer opt;
  StepMonitor monitor;
  TrainStep step;

 private:
  static Network seeded_network(const Config& cfg, const std::function<void(Network&)>& prepare) {
    torch::manual_seed(5);
    Network net = build_network(cfg.model, 2, 1);
    if (prepare) prepare(net);
    return net;
  }
  // Sets the optimizer's learning rate before the step is made over it; `cfg` unchanged.
  static const Config& at_learning_rate(Optimizer& opt, const Config& cfg) {
    opt.set_lr(cfg.training.lr);
    return cfg;
  }
};

}  // namespace u3d::test
