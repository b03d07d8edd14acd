#include "u3d/train/resume.h"

#include <spdlog/spdlog.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/sha256.h"

namespace u3d {
namespace {

// Top-level sections, read from the complete YAML dump (one "section:" line each).
std::vector<std::string> sections() {
  std::vector<std::string> out;
  std::istringstream in(to_yaml(Config{}));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ' && line.back() == ':') out.push_back(line.substr(0, line.size() - 1));
  }
  return out;
}

}  // namespace

const std::vector<std::string>& runtime_config_keys() {
  static const std::vector<std::string> keys = {"experiment.name",
                                                "experiment.output_dir",
                                                "data.preflight",
                                                "experiment.description",
                                                "training.device",
                                                "training.threads",
                                                "training.deterministic",
                                                "training.max_nonfinite_steps",
                                                "training.max_minutes",
                                                "training.early_stop_patience",
                                                "training.cuda_graph",
                                                "training.graph_warmup_steps",
                                                "training.dist_backend",
                                                "training.dist_timeout_s",
                                                "model.channels_last",
                                                "checkpoint.every_epochs",
                                                "checkpoint.keep_last",
                                                "checkpoint.every_minutes",
                                                "checkpoint.on_error",
                                                "predict.*",
                                                "logging.*"};
  return keys;
}

std::vector<ConfigChange> config_changes(const Config& before, const Config& after) {
  std::vector<ConfigChange> out;
  for (const auto& line : diff(before, after)) {  // "key: a -> b"
    const std::string key = line.substr(0, line.find(": "));
    out.push_back({key, get_value(before, key), get_value(after, key)});
  }
  return out;
}

bool key_matches(const std::string& key, const std::vector<std::string>& patterns) {
  const std::string section = key.substr(0, key.find('.'));
  for (const auto& p : patterns) {
    if (p == key || p == section || p == section + ".*") return true;
  }
  return false;
}

void check_allow_patterns(const std::vector<std::string>& patterns) {
  const auto known_sections = sections();
  for (const auto& p : patterns) {
    const bool whole_section = p.find('.') == std::string::npos || (p.size() > 2 && p.substr(p.size() - 2) == ".*");
    if (whole_section) {
      const std::string s = p.substr(0, p.find('.'));
      if (std::find(known_sections.begin(), known_sections.end(), s) == known_sections.end()) {
        throw ConfigError(fmt::format("--allow-config-change: unknown section '{}'; sections are {}", s,
                                      fmt::join(known_sections, ", ")));
      }
      continue;
    }
    try {
      get_value(Config{}, p);
    } catch (const ConfigError& e) {
      std::string what = e.what();
      const std::string prefix = "get_value: ";
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
      throw ConfigError("--allow-config-change: " + what);
    }
  }
}

void check_config_drift(const Config& saved, const Config& now, const std::vector<std::string>& allowed,
                        const std::string& checkpoint) {
  std::vector<ConfigChange> refused;
  for (const auto& c : config_changes(saved, now)) {
    if (key_matches(c.key, runtime_config_keys())) {
      spdlog::info("resume: {} changed: {} -> {}", c.key, c.before, c.after);
    } else if (key_matches(c.key, allowed)) {
      spdlog::warn("resume: {} changed: {} -> {} (allowed by --allow-config-change)", c.key, c.before, c.after);
    } else {
      refused.push_back(c);
    }
  }
  if (refused.empty()) return;
  std::vector<std::string> parts, keys;
  for (const auto& c : refused) {
    parts.push_back(fmt::format("{}: {} -> {}", c.key, c.before, c.after));
    keys.push_back(c.key);
  }
  throw ConfigError(
      fmt::format("resume: the config differs from the one {} was trained with (checkpoint -> now): "
                  "{}; restore those values, or accept the change with --allow-config-change {}",
                  checkpoint, fmt::join(parts, "; "), fmt::join(keys, ",")));
}

std::string case_ids_sha256(const std::vector<std::string>& ids) {
  Sha256 h;
  for (const auto& id : ids) {
    h.update(id);
    h.update("\n");
  }
  return h.hex();
}

}  // namespace u3d
