#include "u3d/io/h5/open_dataset.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "u3d/core/errors.h"

namespace u3d {

std::unique_ptr<DatasetReader> open_dataset(const Config& cfg) {
  std::error_code ec;
  if (!std::filesystem::exists(cfg.data.path, ec)) {
    throw ConfigError(
        fmt::format("{}: data.path: dataset file {} not found (make one with `trainer synth` or "
                    "`trainer import`)",
                    key_origin(cfg, "data.path"), cfg.data.path));
  }
  return std::make_unique<DatasetReader>(cfg.data.path);
}

const std::vector<std::string>& split_ids(const DatasetReader& reader, const std::string& key,
                                          const std::string& name) {
  if (!reader.has_split(name)) {
    std::vector<std::string> names;
    for (const auto& [n, ids] : reader.info().splits) names.push_back(n);
    throw ConfigError(fmt::format("{}: split '{}' is not in {}; it has: {}", key, name, reader.path().string(),
                                  fmt::join(names, ", ")));
  }
  const auto& ids = reader.split(name);
  if (ids.empty()) throw ConfigError(fmt::format("{}: split '{}' of {} is empty", key, name, reader.path().string()));
  return ids;
}

}  // namespace u3d
