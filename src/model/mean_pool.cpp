#include "u3d/model/mean_pool.h"

namespace u3d {

torch::Tensor mean_pool3d(const torch::Tensor& x, const Shape3& stride, bool by_view) {
  if (stride == Shape3{1, 1, 1}) return x;
  if (!by_view) {
    namespace F = torch::nn::functional;
    const torch::ExpandingArray<3> s(at::IntArrayRef(stride.data(), stride.size()));
    return F::avg_pool3d(x, F::AvgPool3dFuncOptions(s).stride(s));
  }
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t d = x.size(2) / stride[0], h = x.size(3) / stride[1], w = x.size(4) / stride[2];
  // Splitting an axis is a view for any strides (channels-last included).
  const torch::Tensor windows = x.narrow(2, 0, d * stride[0])
                                    .narrow(3, 0, h * stride[1])
                                    .narrow(4, 0, w * stride[2])
                                    .view({n, c, d, stride[0], h, stride[1], w, stride[2]});
  return windows.mean({3, 5, 7});
}

}  // namespace u3d
