#include "u3d/plan/nnunet_vram.h"

#include <algorithm>
#include <vector>

namespace u3d {

double nnunet_feature_map_elements(const Topology& t, FilterRange filters, int64_t out_ch, const Shape3& patch) {
  const size_t n = t.strides.size();
  std::vector<double> voxels(n);  // the output size of encoder stage i, in voxels
  std::vector<double> features(n);
  Shape3 size = patch;
  for (size_t i = 0; i < n; ++i) {
    double v = 1;
    for (int a = 0; a < 3; ++a) {
      size[a] /= t.strides[i][a];
      v *= static_cast<double>(size[a]);
    }
    voxels[i] = v;
    features[i] = static_cast<double>(std::min(filters.max, filters.base << std::min<size_t>(i, 30)));
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += 2 * features[i] * voxels[i];  // encoder: two convolutions
  for (size_t i = 0; i + 1 < n; ++i) {
    total += 2 * features[i] * voxels[i];  // decoder stage at skip i: two convolutions
    total += features[i] * voxels[i];      // the transposed convolution up to skip i
  }
  if (n > 0) total += static_cast<double>(out_ch) * voxels[0];  // the segmentation head (no deep supervision)
  return total;
}

NnUNetReference nnunet_reference(bool two_d, double target_gib) {
  NnUNetReference r;
  r.elements = (two_d ? 85e6 : 560e6) * target_gib / 8.0;
  r.batch = two_d ? 12 : 2;
  return r;
}

}  // namespace u3d
