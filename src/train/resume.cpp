#include "u3d/train/resume.h"

#include <spdlog/spdlog.h>

#include <fmt/ranges.h>

#include <errno.h>  // program_invocation_name (glibc): argv[0] as the user typed it

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <string_view>

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

// `arg` as one word of a POSIX shell: unchanged when it holds only safe characters, else in single quotes.
std::string shell_word(const std::string& arg) {
  const bool safe = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("_-./=,:+@%").find(c) != std::string_view::npos;
  });
  if (safe) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string continue_command(const Config& cfg, const std::vector<std::string>& replace) {
  constexpr std::string_view kSet = "--set ";
  std::map<std::string, std::string> sets;  // key -> "key=value", as given
  for (const auto& [key, where] : cfg.origin) {
    if (where.rfind(kSet, 0) == 0) sets[key] = where.substr(kSet.size());
  }
  for (const auto& r : replace) sets[r.substr(0, r.find('='))] = r;
  const char* program = program_invocation_name;
  std::string out = shell_word(program && *program ? program : "trainer");
  out += " --config " + shell_word(cfg.source.empty() ? "CONFIG.yaml" : cfg.source);
  for (const auto& [key, assignment] : sets) out += " --set " + shell_word(assignment);
  return out + " --resume";
}

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
                                                "model.fused_kernels",
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
