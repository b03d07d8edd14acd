// The kernels' and layouts' equality tests (unit/kernels/, unit/model/channels_last_norm_test.cpp,
// gpu/fused_*_test.cpp, gpu/channels_last_norm_cuda_test.cpp): how far a result is from its reference.
#pragma once
#include <torch/torch.h>

#include <algorithm>

namespace u3d::test {

// max |a - b| / max |b| in float64 (b all zero: divided by 1e-12), for tensors of one shape, any dtype.
inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor bd = b.to(torch::kDouble);
  return (a.to(torch::kDouble) - bd).abs().max().item<double>() / std::max(bd.abs().max().item<double>(), 1e-12);
}

}  // namespace u3d::test
