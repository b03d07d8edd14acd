#include "u3d/monitor/status_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace u3d {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 3600) return fmt::format("{}:{:02d}", s / 60, s % 60);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string progress_bar_line(const Progress& p, int64_t epochs, int64_t steps, int columns) {
  const double done = steps > 0 ? std::clamp(static_cast<double>(p.step) / static_cast<double>(steps), 0.0, 1.0) : 0;
  constexpr int kBarWidth = 20;
  const int filled = static_cast<int>(done * kBarWidth);
  const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(kBarWidth - filled, '-');
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const std::string gpu = p.gpu_bytes < 0 ? ""
                          : p.gpu_total > 0
                              ? fmt::format(" | GPU {:.1f}/{:.1f} GiB", static_cast<double>(p.gpu_bytes) / kGiB,
                                            static_cast<double>(p.gpu_total) / kGiB)
                              : fmt::format(" | GPU {:.1f} GiB", static_cast<double>(p.gpu_bytes) / kGiB);
  const std::string skipped = p.skipped > 0 ? fmt::format(" | {} skipped", p.skipped) : "";
  // Narrow terminals lose the drawn bar first, then the lr and the data-wait share, then GPU memory.
  std::string line;
  for (int detail = 3; detail >= 0; --detail) {
    line = fmt::format("epoch {}/{}{} {:3.0f}% {}/{} | {:.2f} it/s | ETA {} run {} | loss {:.5f}{}{}{}{}", p.epoch,
                       epochs, detail == 3 ? " [" + bar + "]" : "", 100.0 * done, p.step, steps, p.steps_per_second,
                       clock_text(p.seconds_left), clock_text(p.run_seconds_left), p.loss,
                       detail >= 2 ? fmt::format(" | lr {:.2e}", p.lr) : "",
                       detail >= 2 ? fmt::format(" | data {:.0f}%", 100.0 * p.data_share) : "", detail >= 1 ? gpu : "",
                       skipped);
    if (columns <= 1 || static_cast<int>(line.size()) < columns) return line;
  }
  line.resize(static_cast<size_t>(columns - 1));  // the last column stays free: no wrap
  return line;
}

}  // namespace u3d
