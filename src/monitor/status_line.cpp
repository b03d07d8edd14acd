#include "u3d/monitor/status_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace u3d {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kTraining: return "training";
    case Phase::kValidating: return "validating";
    case Phase::kCheckpointing: return "checkpointing";
  }
  return "?";
}

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 3600) return fmt::format("{}:{:02d}", s / 60, s % 60);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string tqdm_interval(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds);  // tqdm: int(t), truncated
  if (s < 3600) return fmt::format("{:02d}:{:02d}", s / 60, s % 60);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string tqdm_rate(double per_second) {
  if (!std::isfinite(per_second) || per_second <= 0) return "?it/s";
  return per_second < 1 ? fmt::format("{:5.2f}s/it", 1.0 / per_second) : fmt::format("{:5.2f}it/s", per_second);
}

std::string progress_bar_line(const Progress& p, int64_t epochs, int64_t steps, int columns) {
  const std::string eta = clock_text(p.run_seconds_left);
  std::string line;
  if (p.phase == Phase::kCheckpointing) {
    line = fmt::format("{} epoch {}/{} | run ETA {}", phase_name(p.phase), p.epoch, epochs, eta);
  } else {
    const double done = steps > 0 ? std::clamp(static_cast<double>(p.step) / static_cast<double>(steps), 0.0, 1.0) : 0;
    constexpr int kBarWidth = 20;
    const int filled = static_cast<int>(done * kBarWidth);
    const std::string bar = std::string(static_cast<size_t>(filled), '#') + std::string(kBarWidth - filled, '-');
    // tqdm's meter: n/total [elapsed<remaining, rate]
    const std::string meter = fmt::format("{}/{} [{}<{}, {}]", p.step, steps, tqdm_interval(p.elapsed),
                                          tqdm_interval(p.seconds_left), tqdm_rate(p.steps_per_second));
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    const std::string gpu = p.gpu_bytes < 0 ? ""
                            : p.gpu_total > 0
                                ? fmt::format(" | GPU {:.1f}/{:.1f} GiB", static_cast<double>(p.gpu_bytes) / kGiB,
                                              static_cast<double>(p.gpu_total) / kGiB)
                                : fmt::format(" | GPU {:.1f} GiB", static_cast<double>(p.gpu_bytes) / kGiB);
    const bool training = p.phase == Phase::kTraining;
    const std::string skipped = training && p.skipped > 0 ? fmt::format(" | {} skipped", p.skipped) : "";
    // Narrow terminals lose the drawn bar first, then the lr and the data-wait share, then GPU memory,
    // then the percentage and the separators.
    for (int detail = 3; detail >= 1; --detail) {
      line = fmt::format("{} epoch {}/{}{} {:3.0f}% {} | run ETA {}{}{}{}{}{}{}", phase_name(p.phase), p.epoch, epochs,
                         detail == 3 ? " [" + bar + "]" : "", 100.0 * done, meter, eta,
                         training ? fmt::format(" | loss {:.5f}", p.loss) : "",
                         training && detail >= 2 ? fmt::format(" | lr {:.2e}", p.lr) : "",
                         training && detail >= 2 ? fmt::format(" | data {:.0f}%", 100.0 * p.data_share) : "",
                         training && p.gpu_busy >= 0 ? fmt::format(" | gpu {:.0f}%", 100.0 * p.gpu_busy) : "", gpu,
                         skipped);
      if (columns <= 1 || static_cast<int>(line.size()) < columns) return line;
    }
    line = fmt::format("{} epoch {}/{} {} ETA {}{}{}", phase_name(p.phase), p.epoch, epochs, meter, eta,
                       training ? fmt::format(" loss {:.5f}", p.loss) : "",
                       skipped.empty() ? "" : fmt::format(" {} skipped", p.skipped));
  }
  if (columns > 1 && static_cast<int>(line.size()) >= columns) {
    line.resize(static_cast<size_t>(columns - 1));  // the last column stays free: no wrap
  }
  return line;
}

}  // namespace u3d
