// Program version and the git commit the binary was built from (written into every checkpoint).
#pragma once
#include <string_view>

namespace u3d {
std::string_view version();     // e.g. "0.1.0"
std::string_view git_commit();  // short hash, "-dirty" when built from a modified tree, or "unknown"
}  // namespace u3d
