// Private to src/data: calls f with a value of the C++ type of a cache dtype (uint8, int16, float16,
// float32), for the CPU kernels of patch resampling (augment.cpp) and batch normalisation
// (finalize.cpp).
#pragma once
#include <c10/util/Half.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace u3d {

template <typename F>
void dispatch_dtype(torch::ScalarType t, F&& f) {
  switch (t) {
    case torch::kUInt8: f(uint8_t{}); break;
    case torch::kInt16: f(int16_t{}); break;
    case torch::kHalf: f(c10::Half{}); break;
    case torch::kFloat: f(float{}); break;
    default:
      throw std::invalid_argument(
          fmt::format("dtype {} is not a cache dtype (uint8, int16, float16, float32)", c10::toString(t)));
  }
}

}  // namespace u3d
