#include "u3d/core/finite.h"

#include <fmt/format.h>

#include "u3d/core/errors.h"

namespace u3d {

int64_t non_finite_count(const torch::Tensor& t) {
  if (!t.is_floating_point()) return 0;
  return torch::logical_not(torch::isfinite(t)).sum().item<int64_t>();
}

void check_finite(const torch::Tensor& t, const std::string& what) {
  const int64_t bad = non_finite_count(t);
  if (bad > 0) throw DataError(fmt::format("{} holds {} NaN or Inf voxels", what, bad));
}

}  // namespace u3d
