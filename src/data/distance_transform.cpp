#include "u3d/data/distance_transform.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace u3d {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Squared 1-D distance transform of n contiguous samples f with sample spacing s, written to
// out[0], out[stride], ...; infinite f are no features. v, z: scratch of n and n + 1 entries.
void squared_dt_1d(const double* f, double* out, int64_t n, int64_t stride, double s, std::vector<int64_t>& v,
                   std::vector<double>& z) {
  const double s2 = s * s;
  int64_t k = -1;
  for (int64_t q = 0; q < n; ++q) {
    const double fq = f[q];
    if (!std::isfinite(fq)) continue;
    double x = -kInf;
    while (k >= 0) {
      const int64_t p = v[static_cast<size_t>(k)];
      x = ((fq + s2 * static_cast<double>(q * q)) - (f[p] + s2 * static_cast<double>(p * p))) /
          (2.0 * s2 * static_cast<double>(q - p));
      if (x <= z[static_cast<size_t>(k)]) {
        --k;
      } else {
        break;
      }
    }
    ++k;
    v[static_cast<size_t>(k)] = q;
    z[static_cast<size_t>(k)] = k == 0 ? -kInf : x;
    z[static_cast<size_t>(k + 1)] = kInf;
  }
  if (k < 0) {
    for (int64_t q = 0; q < n; ++q) out[q * stride] = kInf;
    return;
  }
  k = 0;
  for (int64_t q = 0; q < n; ++q) {
    while (z[static_cast<size_t>(k + 1)] < static_cast<double>(q)) ++k;
    const int64_t p = v[static_cast<size_t>(k)];
    const double d = s * static_cast<double>(q - p);
    out[q * stride] = d * d + f[p];
  }
}

}  // namespace

torch::Tensor distance_transform(const torch::Tensor& features, const std::array<double, 3>& spacing) {
  torch::Tensor f =
      torch::where(features.to(torch::kBool), torch::zeros({}, torch::kDouble), torch::full({}, kInf, torch::kDouble))
          .contiguous();
  const int64_t n[3] = {f.size(0), f.size(1), f.size(2)};
  const int64_t stride[3] = {n[1] * n[2], n[2], 1};
  const int64_t longest = std::max({n[0], n[1], n[2]});
  std::vector<int64_t> v(static_cast<size_t>(longest));
  std::vector<double> z(static_cast<size_t>(longest) + 1), line(static_cast<size_t>(longest));
  double* data = f.data_ptr<double>();
  for (int axis = 0; axis < 3; ++axis) {
    const int a1 = (axis + 1) % 3, a2 = (axis + 2) % 3;
    for (int64_t i = 0; i < n[a1]; ++i) {
      for (int64_t j = 0; j < n[a2]; ++j) {
        double* start = data + i * stride[a1] + j * stride[a2];
        for (int64_t q = 0; q < n[axis]; ++q) line[static_cast<size_t>(q)] = start[q * stride[axis]];
        squared_dt_1d(line.data(), start, n[axis], stride[axis], spacing[static_cast<size_t>(axis)], v, z);
      }
    }
  }
  return f.sqrt_();
}

}  // namespace u3d
