#include "u3d/core/stage_geometry.h"

#include <fmt/format.h>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

std::string triple(const Shape3& s) { return fmt::format("[{}, {}, {}]", s[0], s[1], s[2]); }

}  // namespace

Shape3 stage_kernel(const ModelConfig& m, int64_t level) {
  if (!m.kernel_sizes.empty()) return m.kernel_sizes.at(static_cast<size_t>(level));
  return {m.kernel_size, m.kernel_size, m.kernel_size};
}

Shape3 stage_stride(const ModelConfig& m, int64_t level) {
  if (!m.strides.empty()) return m.strides.at(static_cast<size_t>(level));
  return level == 0 ? Shape3{1, 1, 1} : Shape3{2, 2, 2};
}

Shape3 stage_scale(const ModelConfig& m, int64_t level) {
  Shape3 scale = {1, 1, 1};
  for (int64_t l = 0; l <= level; ++l) {
    const Shape3 s = stage_stride(m, l);
    for (size_t a = 0; a < 3; ++a) scale[a] *= s[a];
  }
  return scale;
}

Shape3 patch_divisor(const ModelConfig& m) { return stage_scale(m, m.levels - 1); }

void validate_stage_geometry(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const auto refuse = [&](const std::string& key, const std::string& what) {
    throw ConfigError(fmt::format("{}: {}: {}", key_origin(cfg, key), key, what));
  };
  const bool unet = m.architecture == Architecture::kUNet || m.architecture == Architecture::kResEncUNet;
  for (const auto& [key, list] : {std::pair{"model.kernel_sizes", &m.kernel_sizes}, {"model.strides", &m.strides}}) {
    if (list->empty()) continue;
    if (!unet) refuse(key, "applies to model.architecture unet and resenc_unet only; leave it empty");
    if (static_cast<int64_t>(list->size()) != m.levels) {
      refuse(key, fmt::format("{} triples for model.levels = {}; give one (D, H, W) triple per stage", list->size(),
                              m.levels));
    }
  }
  for (size_t l = 0; l < m.kernel_sizes.size(); ++l) {
    for (const int64_t k : m.kernel_sizes[l]) {
      if (k < 1 || k % 2 == 0) {
        refuse("model.kernel_sizes", fmt::format("stage {} has {}; kernels are odd and at least 1 on every axis", l,
                                                 triple(m.kernel_sizes[l])));
      }
    }
  }
  for (size_t l = 0; l < m.strides.size(); ++l) {
    for (const int64_t s : m.strides[l]) {
      if (s != 1 && s != 2) {
        refuse("model.strides",
               fmt::format("stage {} has {}; a stride is 1 or 2 on every axis", l, triple(m.strides[l])));
      }
    }
    if (l == 0 && m.strides[0] != Shape3{1, 1, 1}) {
      refuse("model.strides",
             fmt::format("stage 0 has {}; the first stage runs at full resolution: [1, 1, 1]", triple(m.strides[0])));
    }
  }
}

}  // namespace u3d
