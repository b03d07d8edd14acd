#include "u3d/model/fused_kernels.h"

#include <fmt/format.h>

#include <algorithm>

#include "u3d/core/errors.h"
#include "u3d/kernels/fused_norm_act.h"

namespace u3d {

const std::vector<std::string>& verified_architectures() {
  // Add an architecture here only with the GPU run that passed FusedNormAct* on it (docs/performance.md).
  static const std::vector<std::string> archs = {};
  return archs;
}

FusedKernelsChoice resolve_fused_kernels(const ModelConfig& cfg, const torch::Device& device) {
  if (cfg.fused_kernels == Toggle::kOff) return {false, "off (model.fused_kernels)"};
  if (cfg.fused_kernels == Toggle::kOn) {
    if (!device.is_cuda()) {
      throw ConfigError(
          fmt::format("model.fused_kernels: on needs a CUDA device, and training runs on {}; use "
                      "auto or off",
                      device.str()));
    }
    if (!kernels::built()) {
      throw ConfigError(
          "model.fused_kernels: on, but this build has no CUDA kernels (built without nvcc or with "
          "-DU3D_CUDA_KERNELS=OFF); use auto or off");
    }
    return {true, fmt::format("on (model.fused_kernels; {})", kernels::device_architecture(device))};
  }
  if (!device.is_cuda()) return {false, "auto: off on CPU"};
  if (!kernels::built()) return {false, "auto: off (this build has no CUDA kernels)"};
  const std::string arch = kernels::device_architecture(device);
  const auto& verified = verified_architectures();
  if (std::find(verified.begin(), verified.end(), arch) == verified.end()) {
    return {false, fmt::format("auto: off ({} not yet verified by the kernels' GPU tests, docs/performance.md)", arch)};
  }
  return {true, fmt::format("auto: on ({} verified)", arch)};
}

FusedKernelsScope::FusedKernelsScope(bool on) : previous_(kernels::enabled()) { kernels::set_enabled(on); }
FusedKernelsScope::~FusedKernelsScope() { kernels::set_enabled(previous_); }

}  // namespace u3d
