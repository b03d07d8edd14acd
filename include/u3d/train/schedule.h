// Learning-rate schedule: a pure function of the global step, so a resumed run continues the
// curve exactly (no state to save beyond the step count).
#pragma once
#include <cstdint>

#include "u3d/core/config.h"

namespace u3d {

class LrSchedule {
 public:
  // total_steps: steps of the whole run (epochs * steps_per_epoch).
  LrSchedule(const TrainingConfig& cfg, int64_t total_steps);
  // Linear warm-up from lr / warmup_steps to lr over warmup_steps, then constant, cosine (to
  // min_lr) or poly ((1 - t)^power) over the remaining steps. `step` counts from 0.
  double at(int64_t step) const;

 private:
  ScheduleKind kind_;
  double lr_, min_lr_, power_;
  int64_t warmup_, total_;
};

}  // namespace u3d
