#include "u3d/train/data_parallel.h"

#include <spdlog/spdlog.h>

#include "u3d/core/signals.h"

namespace u3d {

DataParallel::DataParallel() = default;
DataParallel::~DataParallel() = default;

void DataParallel::join(const LaunchEnv& launch, const TrainingConfig& cfg, const torch::Device& device) {
  if (launch.launched) dist_ = Distributed::join(launch, cfg, device);
}

void DataParallel::sync_gradients(std::vector<torch::Tensor> params) {
  if (dist_) sync_ = std::make_unique<GradientSync>(std::move(params), *dist_);
}

bool DataParallel::rank0_decides(bool local) const {
  if (!dist_) return local;
  return dist_->control_max({dist_->is_main() && local ? 1 : 0})[0] != 0;
}

DataParallel::Agreed DataParallel::agree(int signal, bool save_due) const {
  if (!dist_) return {signal, save_due};
  // One host-side collective for both (Distributed::control_max never waits for the device).
  const std::vector<int> agreed = dist_->control_max({signal, dist_->is_main() && save_due ? 1 : 0});
  if (agreed[0] && !StopSignals::pending()) {
    spdlog::warn("{}: stopping with the other ranks ({} on another rank)", dist_->env().describe(),
                 StopSignals::name(agreed[0]));
  }
  return {agreed[0], agreed[1] != 0};
}

void DataParallel::sync_buffers(torch::nn::Module& net) const {
  if (!dist_) return;
  std::vector<torch::Tensor> stats;
  for (const auto& b : net.buffers()) {
    if (b.is_floating_point()) stats.push_back(b);  // batch-norm running statistics
  }
  if (!stats.empty()) dist_->broadcast_(stats);
}

void DataParallel::barrier() const {
  if (dist_) dist_->barrier();
}

}  // namespace u3d
