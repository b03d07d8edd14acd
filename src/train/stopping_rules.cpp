#include "u3d/train/stopping_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "u3d/train/resume.h"

namespace u3d {

std::string StoppingRules::after_epoch(int64_t epoch, double next_epoch_seconds, const TrainState& state) const {
  const TrainingConfig& t = rc_.cfg.training;
  if (epoch >= t.epochs) return "";
  // Patience counts the epochs after the best one that measured the monitored value: an epoch
  // without validation (training.val_every) is no evidence that it stopped improving.
  int64_t unimproved = 0;
  for (int64_t e = state.best_epoch + 1; t.early_stop_patience > 0 && e <= epoch; ++e) {
    if (rc_.monitor_measured(e)) ++unimproved;
  }
  if (t.early_stop_patience > 0 && unimproved >= t.early_stop_patience) {
    return fmt::format(
        "early stop: {} has not improved for {} epochs ({} validated; training.early_stop_patience {}; best {} at "
        "epoch {})",
        rc_.monitor_name, epoch - state.best_epoch, unimproved, t.early_stop_patience,
        std::isfinite(state.best_metric) ? fmt::format("{:.6g}", state.best_metric) : "none yet", state.best_epoch);
  }
  const double budget = t.max_minutes * 60.0;
  if (budget > 0 && state.run_seconds + next_epoch_seconds > budget) {
    return fmt::format(
        "time budget: {:.3g} of training.max_minutes {:g} min used and an epoch takes {:.3g} min; to go on, raise "
        "training.max_minutes: {}",
        state.run_seconds / 60.0, t.max_minutes, next_epoch_seconds / 60.0,
        continue_command(rc_.cfg, {fmt::format("training.max_minutes={:g}", 2 * t.max_minutes)}));
  }
  return "";
}

double StoppingRules::next_epoch_seconds(int64_t epoch, double epoch_seconds, double validation_seconds) const {
  const auto validation = [&](int64_t e) { return rc_.full_validation_due(e) ? validation_seconds : 0.0; };
  return std::max(0.0, epoch_seconds - validation(epoch)) + validation(epoch + 1);
}

std::string StoppingRules::nothing_left(const TrainState& state, bool resumed) const {
  if (!resumed || state.step_in_epoch != 0) return "";
  const int64_t epochs = rc_.cfg.training.epochs;
  if (state.epoch >= epochs) {
    return fmt::format(
        "all {} epochs are done (to train on: --set training.epochs=N --allow-config-change training.epochs)", epochs);
  }
  return after_epoch(state.epoch, /*next_epoch_seconds=*/0.0, state);
}

}  // namespace u3d
