// Average pooling with kernel == stride (the residual block's skip path, nnU-Net's AvgPool3d(s, s)),
// per axis (D, H, W): (N, C, D, H, W) -> (N, C, D / s_D, H / s_H, W / s_W), trailing voxels that do not fill a window
// dropped (avg_pool3d's floor). `by_view`: as a view of the windows and a mean over them, equal to avg_pool3d to float
// rounding, whose backward is an expand: used on CUDA under deterministic algorithms (training.deterministic), where
// avg_pool3d's backward has no deterministic kernel and throws; no host reads or data-dependent shapes, so a CUDA graph
// captures it. Otherwise avg_pool3d itself (a traced export then stays valid for other input shapes).
#pragma once
#include <torch/torch.h>

#include "u3d/core/config.h"

namespace u3d {

torch::Tensor mean_pool3d(const torch::Tensor& x, const Shape3& stride, bool by_view);
inline torch::Tensor mean_pool3d(const torch::Tensor& x, int64_t stride, bool by_view) {
  return mean_pool3d(x, Shape3{stride, stride, stride}, by_view);
}

}  // namespace u3d
