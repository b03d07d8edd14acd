// A config as text, all through the option table (config_options.h; a new key is one line there):
// loading YAML and --set overrides (load_config, apply_override), printing (to_yaml, describe,
// get_value), diffing and the reference; the enum names (to_string) and a key's place (key_origin).
// The cross-key checks are config_validate.cpp's. Apart from config.h, which the codecs and the
// table include, so that the config's types sit below what reads and writes them.
#include "config_codec.h"
#include "config_options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/normalize_spec.h"
#include "u3d/core/stage_geometry.h"
#include "u3d/core/text.h"

namespace u3d {

using namespace config_detail;  // the option table and the codecs are this file's vocabulary

namespace {

size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string leaf(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// " (did you mean 'data.batch_size'?)" or "".
std::string suggestion(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = levenshtein(key, c);
    if (leaf(key) == leaf(c)) d = std::min<size_t>(d, 1);  // right key, wrong section
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const size_t limit = std::max<size_t>(2, key.size() / 4);
  return (best_d <= limit) ? fmt::format(" (did you mean '{}'?)", best) : "";
}

// Names other tools (nnU-Net, PyTorch Lightning, Hugging Face, MONAI, Keras) give to keys of ours,
// matched on the last part of an unknown key: "training.learning_rate", "lr" or "trainer.max_epochs".
// A name that is already the last part of one of our keys (batch_size, weight_decay) is left to
// suggestion(), which finds it in any section.
const std::map<std::string, std::string>& synonyms() {
  static const std::map<std::string, std::string> table = {
      {"learning_rate", "training.lr"},
      {"initial_lr", "training.lr"},
      {"base_lr", "training.lr"},
      {"lr_scheduler", "training.lr_schedule"},
      {"scheduler", "training.lr_schedule"},
      {"num_epochs", "training.epochs"},
      {"max_epochs", "training.epochs"},
      {"n_epochs", "training.epochs"},
      {"num_iterations_per_epoch", "training.steps_per_epoch"},
      {"iterations_per_epoch", "training.steps_per_epoch"},
      {"steps", "training.steps_per_epoch"},
      {"bs", "data.batch_size"},
      {"train_batch_size", "data.batch_size"},
      {"per_device_train_batch_size", "data.batch_size"},
      {"num_workers", "data.workers"},
      {"oversample_foreground_percent", "data.foreground_fraction"},
      {"crop_size", "data.patch_size"},
      {"roi_size", "data.patch_size"},
      {"gradient_clip_val", "training.grad_clip_norm"},
      {"max_grad_norm", "training.grad_clip_norm"},
      {"clip_grad_norm", "training.grad_clip_norm"},
      {"accumulate_grad_batches", "training.accumulate_steps"},
      {"gradient_accumulation_steps", "training.accumulate_steps"},
      {"amp", "training.precision"},
      {"mixed_precision", "training.precision"},
      {"fp16", "training.precision"},
      {"check_val_every_n_epoch", "training.val_every"},
      {"val_interval", "training.val_every"},
      {"patience", "training.early_stop_patience"},
      {"loss_function", "training.loss"},
      {"random_seed", "experiment.seed"},
      {"save_top_k", "checkpoint.keep_last"},
  };
  return table;
}

[[noreturn]] void unknown_key(const std::string& where, const std::string& key) {
  const bool is_section = key.find('.') == std::string::npos;
  if (const auto it = synonyms().find(leaf(key)); it != synonyms().end()) {
    throw ConfigError(fmt::format("{}: unknown {} '{}' (did you mean '{}'? '{}' is its name in other tools)", where,
                                  is_section ? "section" : "key", key, it->second, leaf(key)));
  }
  std::vector<std::string> keys;
  for (const auto& o : option_table()) keys.push_back(o.key);
  const auto by_leaf = std::find_if(keys.begin(), keys.end(), [&](const std::string& k) { return leaf(k) == key; });
  if (is_section && by_leaf != keys.end()) {  // `--set lr=0.01`, `epochs:` at the top of the file
    throw ConfigError(fmt::format("{}: unknown section '{}' (did you mean '{}'?)", where, key, *by_leaf));
  }
  throw ConfigError(fmt::format("{}: unknown {} '{}'{}", where, is_section ? "section" : "key", key,
                                suggestion(key, is_section ? section_names() : keys)));
}

void apply_yaml(Config& cfg, const YAML::Node& root, const std::string& source) {
  if (!root || root.IsNull()) return;
  if (!root.IsMap()) {
    throw ConfigError(fmt::format("{}: expected a mapping of sections ({})", where_of(source, root),
                                  fmt::join(section_names(), ", ")));
  }
  const auto sections = section_names();
  std::set<std::string> seen;
  for (const auto& section_it : root) {
    const std::string section = section_it.first.Scalar();
    const std::string section_where = where_of(source, section_it.first);
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) unknown_key(section_where, section);
    if (!seen.insert(section).second) {
      throw ConfigError(fmt::format("{}: section '{}' appears twice", section_where, section));
    }
    const YAML::Node& body = section_it.second;
    if (body.IsNull()) continue;
    if (!body.IsMap()) {
      throw ConfigError(fmt::format("{}: {}: expected a mapping of keys, got {}", section_where, section, shown(body)));
    }
    for (const auto& kv : body) {
      const std::string key = section + "." + kv.first.Scalar();
      const std::string key_where = where_of(source, kv.first);
      const Option* opt = find_option(key);
      if (!opt) unknown_key(key_where, key);
      if (!seen.insert(key).second) throw ConfigError(fmt::format("{}: key '{}' appears twice", key_where, key));
      opt->set(cfg, kv.second, where_of(source, kv.second));
    }
  }
}

// One YAML document: a second ("---" and more keys) would be ignored by YAML::Load, so it is refused.
YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  // An empty document ("---" at the end) holds nothing that could be ignored.
  documents.erase(std::remove_if(documents.begin() + (documents.empty() ? 0 : 1), documents.end(),
                                 [](const YAML::Node& d) { return !d || d.IsNull(); }),
                  documents.end());
  if (documents.size() > 1) {
    throw ConfigError(
        fmt::format("{}: a second YAML document (after '---'); a config is one document, and the keys "
                    "after it would be ignored",
                    where_of(source, documents[1])));
  }
  return documents.empty() ? YAML::Node() : documents.front();
}

}  // namespace

std::string to_string(Device v) { return enum_name(v); }
std::string to_string(Norm v) { return enum_name(v); }
std::string to_string(Activation v) { return enum_name(v); }
std::string to_string(Architecture v) { return enum_name(v); }
std::string to_string(ModelPreset v) { return enum_name(v); }
std::string to_string(Checkpointing v) { return enum_name(v); }
std::string to_string(OutputActivation v) { return enum_name(v); }
std::string to_string(OptimizerKind v) { return enum_name(v); }
std::string to_string(ScheduleKind v) { return enum_name(v); }
std::string to_string(LossKind v) { return enum_name(v); }
std::string to_string(Head v) { return enum_name(v); }
std::string to_string(Monitor v) { return enum_name(v); }
std::string to_string(CachePlacement v) { return enum_name(v); }
std::string to_string(Tta v) { return enum_name(v); }
std::string to_string(SaveErrorPolicy v) { return enum_name(v); }
std::string to_string(Precision v) { return enum_name(v); }
std::string to_string(Toggle v) { return enum_name(v); }
std::string to_string(DistBackend v) { return enum_name(v); }
std::string to_string(ProgressMode v) { return enum_name(v); }
// -----------------------------------------------------------------------------------------------

void apply_override(Config& cfg, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(fmt::format("--set {}: expected key.path=value (e.g. --set training.epochs=3)", assignment));
  }
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  const std::string where = "--set " + assignment;
  const Option* opt = find_option(key);
  if (!opt) {
    const auto sections = section_names();
    if (std::find(sections.begin(), sections.end(), key) != sections.end()) {
      throw ConfigError(
          fmt::format("{}: '{}' is a section and cannot take a value; set one of its keys, e.g. "
                      "--set {}.{}=...",
                      where, key, key, leaf(first_key_of(key))));
    }
    unknown_key("--set", key);
  }
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}: {}: value is not valid YAML: {}", where, key, e.msg));
  }
  opt->set(cfg, node, where);
}

Config load_config_from_string(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides) {
  Config cfg;
  cfg.source = source;
  apply_yaml(cfg, parse_yaml(yaml, source), source);
  for (const auto& o : overrides) apply_override(cfg, o);
  apply_model_preset(cfg);
  resolve_slices(cfg);
  validate(cfg);
  return cfg;
}

Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw ConfigError(fmt::format("config file {} not found", path.string()));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(fmt::format("config file {} is a folder; expected a YAML file", path.string()));
  }
  std::string text;
  try {
    check_input_file(path, kMaxConfigBytes, "a config file (YAML)");  // not /dev/zero, a FIFO, 2 GB
    text = read_file(path);
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  return load_config_from_string(text, path.string(), overrides);
}

std::string key_origin(const Config& cfg, const std::string& key) {
  const auto it = cfg.origin.find(key);
  if (it != cfg.origin.end()) return it->second;
  return cfg.source.empty() ? std::string("config") : cfg.source + " (default)";
}

std::optional<int64_t> fold_number(const Config& cfg) {
  if (cfg.experiment.fold.empty() || cfg.experiment.fold == "all") return std::nullopt;
  return parse_int(cfg.experiment.fold);
}

std::string to_yaml(const Config& cfg) {
  std::string out;
  std::string section;
  for (const auto& o : option_table()) {
    const auto s = o.key.substr(0, o.key.find('.'));
    if (s != section) {
      section = s;
      out += section + ":\n";
    }
    out += fmt::format("  {}: {}\n", leaf(o.key), o.get(cfg));
  }
  return out;
}

std::string describe(const Config& cfg) {
  size_t width = 0;
  for (const auto& o : option_table()) width = std::max(width, o.key.size());
  std::string out;
  for (const auto& o : option_table()) out += fmt::format("  {:<{}}  {}\n", o.key, width, o.get(cfg));
  return out;
}

std::string get_value(const Config& cfg, const std::string& key) {
  const Option* opt = find_option(key);
  if (!opt) unknown_key("get_value", key);
  return opt->get(cfg);
}

std::vector<std::string> diff(const Config& a, const Config& b) {
  std::vector<std::string> out;
  for (const auto& o : option_table()) {
    const auto va = o.get(a);
    const auto vb = o.get(b);
    if (va != vb) out.push_back(fmt::format("{}: {} -> {}", o.key, va, vb));
  }
  return out;
}

std::string reference_markdown() {
  const Config defaults;
  std::string out =
      "# Configuration reference\n\n"
      "Generated by `trainer config-reference`; every key of the option table in src/core/config_options.cpp.\n"
      "A config file is YAML with these sections; any key can be overridden with `--set key=value`.\n"
      "Unknown keys are errors. `<run>/config.yaml` holds the resolved value of every key.\n";
  std::string section;
  for (const auto& o : option_table()) {
    const auto s = o.key.substr(0, o.key.find('.'));
    if (s != section) {
      section = s;
      out += fmt::format("\n## {}\n\n| key | type | default | meaning |\n|---|---|---|---|\n", section);
    }
    std::string type = o.type;
    std::replace(type.begin(), type.end(), '|', '/');
    std::string doc = o.doc;
    for (size_t p = doc.find('|'); p != std::string::npos; p = doc.find('|', p + 2)) doc.replace(p, 1, "\\|");
    out += fmt::format("| `{}` | {} | `{}` | {} |\n", o.key, type, o.get(defaults), doc);
  }
  return out;
}

}  // namespace u3d
