#include "u3d/core/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace u3d {

PercentileRank percentile_rank(size_t n, double q) {
  const double virtual_index = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(n - 1);
  PercentileRank r;
  r.lo = std::min(n - 1, static_cast<size_t>(std::floor(virtual_index)));
  r.hi = std::min(n - 1, r.lo + 1);
  r.t = virtual_index - std::floor(virtual_index);
  return r;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const PercentileRank r = percentile_rank(values.size(), q);
  return percentile_lerp(values[r.lo], values[r.hi], r.t);
}

}  // namespace u3d
