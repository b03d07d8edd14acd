#include "u3d/train/fault_hooks.h"

#include <chrono>
#include <csignal>
#include <limits>
#include <thread>

namespace u3d {

void FaultHooks::arm(TrainStep& step, const TrainState& state) const {
  if (faults_.inf_grad.empty()) return;
  step.set_after_backward([faults = &faults_, state = &state](const std::vector<torch::Tensor>& params) {
    if (!faults->inf_grad.count(state->global_step + 1)) return;
    torch::NoGradGuard no_grad;
    plant_value(params[0].mutable_grad(), std::numeric_limits<float>::infinity());  // any layout
  });
}

void FaultHooks::on_batch(Batch& batch, int64_t m, int64_t global_step) {
  if (m == 0 && faults_.nan_batch.count(global_step)) {
    batch.image = batch.image.clone();
    plant_value(batch.image, std::numeric_limits<float>::quiet_NaN());
  }
  ++micro_batches_;
  if (faults_.stop_micro.count(micro_batches_)) std::raise(SIGTERM);  // a stop mid-accumulation
  if (faults_.slow_step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(faults_.slow_step_ms));
}

}  // namespace u3d
