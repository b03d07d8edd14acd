#include "u3d/core/output_guard.h"

#include <fmt/format.h>

#include "u3d/core/errors.h"

namespace u3d {

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  const bool same = std::filesystem::equivalent(a, b, ec);
  if (!ec) return same;
  // One of them does not exist (yet): the same path once links and ".." are resolved.
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

void refuse_output_over_input(const std::string& command, const std::string& flag, const std::filesystem::path& output,
                              const std::vector<std::filesystem::path>& inputs) {
  for (const auto& input : inputs) {
    if (same_file(output, input)) {
      throw UsageError(fmt::format(
          "{}: {} {} is the input {}; write it elsewhere (--force replaces an earlier output, never an input)", command,
          flag, output.string(), input.string()));
    }
  }
}

}  // namespace u3d
