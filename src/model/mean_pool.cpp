#include "u3d/model/mean_pool.h"

namespace u3d {

torch::Tensor mean_pool3d(const torch::Tensor& x, int64_t stride, bool by_view) {
  if (stride == 1) return x;
  if (!by_view) {
    namespace F = torch::nn::functional;
    return F::avg_pool3d(x, F::AvgPool3dFuncOptions(stride).stride(stride));
  }
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t d = x.size(2) / stride, h = x.size(3) / stride, w = x.size(4) / stride;
  // Splitting an axis is a view for any strides (channels-last included).
  const torch::Tensor windows = x.narrow(2, 0, d * stride)
                                    .narrow(3, 0, h * stride)
                                    .narrow(4, 0, w * stride)
                                    .view({n, c, d, stride, h, stride, w, stride});
  return windows.mean({3, 5, 7});
}

}  // namespace u3d
