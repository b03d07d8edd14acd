#include "u3d/monitor/epoch_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace u3d {

double epoch_wall_seconds(const EpochTime& t, double val_seconds) {
  return t.training + (std::isfinite(val_seconds) ? val_seconds : 0.0) + t.checkpoint;
}

double gpu_busy_share(const EpochTime& t, double val_seconds) {
  const double wall = epoch_wall_seconds(t, val_seconds);
  if (!std::isfinite(t.gpu) || !(wall > 0)) return std::nan("");
  return std::clamp(t.gpu / wall, 0.0, 1.0);
}

std::string gpu_idle_note(const EpochTime& t, double val_seconds) {
  const double busy = gpu_busy_share(t, val_seconds);
  if (!std::isfinite(busy) || busy >= kLowGpuBusy) return "";
  const double wall = epoch_wall_seconds(t, val_seconds);
  const double val = std::isfinite(val_seconds) ? val_seconds : 0.0;
  const double host = std::max(0.0, t.training - t.gpu - t.data_wait);
  auto pct = [&](double s) { return 100.0 * s / wall; };
  return fmt::format(
      "GPU idle {:.0f}% of {:.1f} s: data wait {:.0f}%, validation {:.0f}%, checkpoint writes {:.0f}%, host work "
      "between steps {:.0f}%",
      100.0 * (1.0 - busy), wall, pct(t.data_wait), pct(val), pct(t.checkpoint), pct(host));
}

}  // namespace u3d
