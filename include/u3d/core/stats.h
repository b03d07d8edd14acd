// Host statistics with one convention. For tensors on a device, dose_metrics.h's percentiles()
// follows the same numpy "linear" convention.
#pragma once
#include <vector>

namespace u3d {

// numpy.percentile(values, q) with its default "linear" method: the virtual index
// (n - 1) * q / 100 interpolated between its two neighbouring order statistics. q in [0, 100]
// (clamped); NaN for no values.
double percentile(std::vector<double> values, double q);

}  // namespace u3d
