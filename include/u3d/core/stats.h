// Host statistics with one convention, stated here once: percentiles follow numpy.percentile's
// default "linear" method. The virtual index of q (0..100, clamped) among n sorted values is
// (n - 1) * q / 100; the result interpolates between the order statistics at its floor and the
// next one, as numpy computes it (a + (b - a) t for t < 0.5, b - (b - a) (1 - t) otherwise).
// dose_metrics.h's percentiles() (tensors, on their device) takes its ranks from percentile_rank().
#pragma once
#include <cstddef>
#include <vector>

namespace u3d {

// Where percentile q of n > 0 sorted values falls: order statistics lo and hi, weight t of hi.
struct PercentileRank {
  size_t lo = 0, hi = 0;
  double t = 0;
};
PercentileRank percentile_rank(size_t n, double q);
// numpy's interpolation between order statistics a (at lo) and b (at hi) with weight t.
inline double percentile_lerp(double a, double b, double t) {
  return t >= 0.5 ? b - (b - a) * (1.0 - t) : a + (b - a) * t;
}

// numpy.percentile(values, q); NaN for no values.
double percentile(std::vector<double> values, double q);

}  // namespace u3d
