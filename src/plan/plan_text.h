// Private to src/plan: the small text and size helpers the planner and its YAML writer share.
#pragma once
#include <fmt/format.h>

#include <string>

#include "u3d/core/config.h"

namespace u3d::plan_detail {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

inline int64_t voxels(const Shape3& s) { return s[0] * s[1] * s[2]; }

// A shape as a YAML flow list: "[128, 128, 64]".
inline std::string flow_list(const Shape3& s) { return fmt::format("[{}, {}, {}]", s[0], s[1], s[2]); }

}  // namespace u3d::plan_detail
