// What the tests name a device and a layout by, defined once so that test files compiled together
// (CI's unity build, .ci/run) do not define them twice: the first CUDA device (the GPU tests skip
// without one, tests/gpu/) and channels-last 3D (NDHWC).
#pragma once
#include <torch/torch.h>

namespace u3d::test {

inline const torch::Device kCuda(torch::kCUDA, 0);
inline constexpr auto kCl = at::MemoryFormat::ChannelsLast3d;

}  // namespace u3d::test
