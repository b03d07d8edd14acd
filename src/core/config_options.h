// Private to src/core: the option table, the one place a config key is parsed, printed, diffed and
// documented (config_text.cpp walks it for load_config, to_yaml, describe, diff and the reference).
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d::config_detail {

struct Option {
  std::string key;
  std::string type;  // what a value looks like, for the reference, e.g. "integer"
  std::string doc;   // the sentence users read
  // Parses `node` into cfg (ConfigError naming `where` and the key) and records where it was set.
  std::function<void(Config&, const YAML::Node&, const std::string& where)> set;
  std::function<std::string(const Config&)> get;  // the value as YAML flow text
};

// Every key, in the order of docs/config.md.
const std::vector<Option>& option_table();
// nullptr for an unknown key.
const Option* find_option(const std::string& key);
// The first key of `section` in the table ("training" -> "training.epochs").
std::string first_key_of(const std::string& section);
// "experiment", "data", ... in table order.
std::vector<std::string> section_names();
// model.preset: sets the preset's model keys that `cfg` leaves unset (src/core/model_presets.cpp).
void apply_model_preset(Config& cfg);

}  // namespace u3d::config_detail
