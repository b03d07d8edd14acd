// The dataset a config names: the file of data.path, opened with a ConfigError naming the key, and
// the case ids of a split named by a config key. Training (train/resolve.h), prediction
// (predict/resolve_prediction.h) and the benchmarks open their data through these two.
//
//   const auto reader = open_dataset(cfg);                                  // ConfigError naming data.path
//   const auto& ids = split_ids(*reader, "predict.split", cfg.predict.split);  // ConfigError naming the key
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

// Opens data.path; ConfigError naming the key (and where it was set) when the file is missing.
std::unique_ptr<DatasetReader> open_dataset(const Config& cfg);
// The case ids of split `name` (config key `key`); ConfigError naming the key and the splits the
// file has when it is absent, or when it is empty.
const std::vector<std::string>& split_ids(const DatasetReader& reader, const std::string& key, const std::string& name);

}  // namespace u3d
