// The launch DType (kernel_dtype.h) of a tensor, for the room's .cpp files, which own the tensors:
// float32, float16, bfloat16; any other type reads as float32 (the callers' applies() refused it).
#pragma once
#include <torch/torch.h>

#include "kernel_dtype.h"

namespace u3d::kernels::launch {

inline DType dtype_of(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kHalf: return DType::kHalf;
    case torch::kBFloat16: return DType::kBFloat16;
    default: return DType::kFloat;
  }
}

}  // namespace u3d::kernels::launch
