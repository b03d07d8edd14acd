#include "u3d/model/fused_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "u3d/core/errors.h"
#include "u3d/kernels/fused_norm_act.h"

namespace u3d {

const std::vector<std::string>& verified_architectures(kernels::Family family) {
  // Add an architecture to a family only with the GPU run that passed its tests there and measured its
  // step no slower than ATen's (docs/performance.md); a family slower than ATen stays out.
  // e.g. {kernels::Family::kBatchNorm, {"sm_90"}}.
  static const std::map<kernels::Family, std::vector<std::string>> table = {
      {kernels::Family::kBatchNorm, {}},
      {kernels::Family::kGroupNorm, {}},
      {kernels::Family::kDecoderConcat, {}},
      {kernels::Family::kLoss, {}},
  };
  return table.at(family);
}

kernels::Families verified_families(const std::string& architecture) {
  kernels::Families out = kernels::kNoFamilies;
  for (const kernels::Family f : kernels::all_families()) {
    const auto& archs = verified_architectures(f);
    if (std::find(archs.begin(), archs.end(), architecture) != archs.end()) out |= kernels::bit(f);
  }
  return out;
}

FusedKernelsChoice resolve_fused_kernels(const ModelConfig& cfg, const torch::Device& device) {
  if (cfg.fused_kernels == Toggle::kOff) return {kernels::kNoFamilies, "off (model.fused_kernels)"};
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
    return {kernels::kAllFamilies, fmt::format("on (model.fused_kernels; {})", kernels::device_architecture(device))};
  }
  if (!device.is_cuda()) return {kernels::kNoFamilies, "auto: off on CPU"};
  if (!kernels::built()) return {kernels::kNoFamilies, "auto: off (this build has no CUDA kernels)"};
  const std::string arch = kernels::device_architecture(device);
  const kernels::Families on = verified_families(arch);
  if (on == kernels::kNoFamilies) {
    return {on, fmt::format("auto: off ({} not yet verified by the kernels' GPU tests, docs/performance.md)", arch)};
  }
  if (on == kernels::kAllFamilies) return {on, fmt::format("auto: on ({} verified)", arch)};
  return {on, fmt::format("auto: on for {} ({} verified); off for {} (not yet verified there, docs/performance.md)",
                          kernels::family_names(on), arch, kernels::family_names(kernels::kAllFamilies & ~on))};
}

FusedKernelsScope::FusedKernelsScope(kernels::Families families) : previous_(kernels::enabled_families()) {
  kernels::set_enabled(families);
}
FusedKernelsScope::~FusedKernelsScope() { kernels::set_enabled(previous_); }

}  // namespace u3d
