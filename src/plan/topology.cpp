#include "u3d/plan/topology.h"

#include <algorithm>

namespace u3d {

Topology pool_and_conv_props(const std::array<double, 3>& spacing, const Shape3& patch, int64_t min_edge,
                             int64_t max_stages) {
  std::array<double, 3> current = spacing;
  Shape3 size = patch;
  Shape3 kernel = {1, 1, 1};
  Topology t;
  t.strides.push_back({1, 1, 1});
  t.divisor = {1, 1, 1};
  while (t.stages() < max_stages) {
    std::vector<size_t> valid;  // axes that keep >= 2 x min_edge voxels
    for (size_t a = 0; a < 3; ++a) {
      if (size[a] >= 2 * min_edge) valid.push_back(a);
    }
    if (valid.empty()) break;
    double finest_valid = current[valid.front()];
    for (const size_t a : valid) finest_valid = std::min(finest_valid, current[a]);
    valid.erase(std::remove_if(valid.begin(), valid.end(), [&](size_t a) { return current[a] / finest_valid >= 2; }),
                valid.end());
    if (valid.size() == 1 && size[valid.front()] < 3 * min_edge) break;
    if (valid.empty()) break;
    const double finest = *std::min_element(current.begin(), current.end());
    for (size_t a = 0; a < 3; ++a) {
      if (kernel[a] != 3 && current[a] / finest < 2) kernel[a] = 3;
    }
    Shape3 stride = {1, 1, 1};
    for (const size_t a : valid) {
      stride[a] = 2;
      current[a] *= 2;
      size[a] = (size[a] + 1) / 2;  // ceil
      t.divisor[a] *= 2;
    }
    t.strides.push_back(stride);
    t.kernels.push_back(kernel);
  }
  t.kernels.push_back({3, 3, 3});  // the bottleneck
  return t;
}

}  // namespace u3d
