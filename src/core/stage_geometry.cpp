#include "u3d/core/stage_geometry.h"

#include <fmt/format.h>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

std::string triple(const Shape3& s) { return fmt::format("[{}, {}, {}]", s[0], s[1], s[2]); }

}  // namespace

Shape3 stage_kernel(const ModelConfig& m, int64_t level) {
  if (!m.kernel_sizes.empty()) return m.kernel_sizes.at(static_cast<size_t>(level));
  Shape3 k = {m.kernel_size, m.kernel_size, m.kernel_size};
  if (m.dims == 2) k[static_cast<size_t>(m.slice_axis)] = 1;
  return k;
}

Shape3 stage_stride(const ModelConfig& m, int64_t level) {
  if (!m.strides.empty()) return m.strides.at(static_cast<size_t>(level));
  Shape3 s = level == 0 ? Shape3{1, 1, 1} : Shape3{2, 2, 2};
  if (m.dims == 2) s[static_cast<size_t>(m.slice_axis)] = 1;
  return s;
}

Shape2 in_plane(const Shape3& s, int64_t slice_axis) {
  Shape2 out{};
  for (size_t a = 0, i = 0; a < 3; ++a) {
    if (static_cast<int64_t>(a) != slice_axis) out[i++] = s[a];
  }
  return out;
}

void resolve_slices(Config& cfg) {
  if (cfg.model.dims != 2) return;
  const auto axis = static_cast<size_t>(cfg.data.slice_axis);
  cfg.model.slice_axis = cfg.data.slice_axis;
  Shape3& patch = cfg.data.patch_size;
  if (patch[axis] == 1) return;
  if (patch[0] == patch[1] && patch[1] == patch[2]) {  // a cube (one number): its slice
    patch[axis] = 1;
    return;
  }
  Shape3 slice = patch;
  slice[axis] = 1;
  throw ConfigError(fmt::format("{}: data.patch_size: {} must be 1 on data.slice_axis {} for model.dims 2 (e.g. {})",
                                key_origin(cfg, "data.patch_size"), triple(patch), axis, triple(slice)));
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
  if (m.dims == 2 && !unet) {
    refuse("model.dims", fmt::format("2 applies to model.architecture unet and resenc_unet, not {}; use 3",
                                     to_string(m.architecture)));
  }
  for (const auto& [key, list] : {std::pair{"model.kernel_sizes", &m.kernel_sizes}, {"model.strides", &m.strides}}) {
    if (list->empty()) continue;
    if (!unet) refuse(key, "applies to model.architecture unet and resenc_unet only; leave it empty");
    if (static_cast<int64_t>(list->size()) != m.levels) {
      refuse(key, fmt::format("{} triples for model.levels = {}; give one (D, H, W) triple per stage", list->size(),
                              m.levels));
    }
    for (size_t l = 0; m.dims == 2 && l < list->size(); ++l) {
      if ((*list)[l][static_cast<size_t>(m.slice_axis)] == 1) continue;
      refuse(key, fmt::format("stage {} has {}; with model.dims 2 the slice axis {} takes {} 1", l, triple((*list)[l]),
                              m.slice_axis, list == &m.strides ? "stride" : "kernel"));
    }
  }
  for (size_t l = 0; l < m.kernel_sizes.size(); ++l) {
    for (const int64_t k : m.kernel_sizes[l]) {
      if (k < 1 || k % 2 == 0) {
        refuse("model.kernel_sizes", fmt::format("stage {} has {}; kernels are odd and at least 1 on every axis", l,
                                                 triple(m.kernel_sizes[l])));
      }
    }
    if (m.dims == 2 && m.kernel_sizes[l][static_cast<size_t>(m.slice_axis)] != 1) {
      refuse("model.kernel_sizes", fmt::format("stage {} has {}; with model.dims 2 the slice axis {} takes kernel 1", l,
                                               triple(m.kernel_sizes[l]), m.slice_axis));
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
