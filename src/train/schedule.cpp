#include "u3d/train/schedule.h"

#include <algorithm>
#include <cmath>

namespace u3d {

LrSchedule::LrSchedule(const TrainingConfig& cfg, int64_t total_steps)
    : kind_(cfg.lr_schedule),
      lr_(cfg.lr),
      min_lr_(cfg.min_lr),
      power_(cfg.poly_power),
      warmup_(cfg.warmup_steps),
      total_(std::max<int64_t>(1, total_steps)) {}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  const int64_t span = std::max<int64_t>(1, total_ - warmup_);
  const double t = std::clamp(static_cast<double>(step - warmup_) / static_cast<double>(span), 0.0, 1.0);
  switch (kind_) {
    case ScheduleKind::kConstant: return lr_;
    case ScheduleKind::kCosine: return min_lr_ + 0.5 * (lr_ - min_lr_) * (1.0 + std::cos(M_PI * t));
    case ScheduleKind::kPoly: return lr_ * std::pow(1.0 - t, power_);
  }
  return lr_;
}

}  // namespace u3d
