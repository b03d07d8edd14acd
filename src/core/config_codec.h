// Private to src/core: the YAML names of the config enums and the value codecs of the option
// table (parse a YAML node with the key and position for messages; format a value as YAML flow
// text). config_options.cpp builds the table from them; config_text.cpp and config_validate.cpp
// format values in messages.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/text.h"

namespace u3d::config_detail {

// ---------------------------------------------------------------------------------------------
// Enum names as written in YAML.
template <class E>
struct EnumNames;
#define U3D_ENUM_NAMES(E, ...)                                                   \
  template <>                                                                    \
  struct EnumNames<E> {                                                          \
    static const std::vector<std::pair<E, std::string>>& get() {                 \
      static const std::vector<std::pair<E, std::string>> names = {__VA_ARGS__}; \
      return names;                                                              \
    }                                                                            \
  };
U3D_ENUM_NAMES(Device, {Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"})
U3D_ENUM_NAMES(Norm, {Norm::kBatch, "batch"}, {Norm::kInstance, "instance"}, {Norm::kGroup, "group"},
               {Norm::kNone, "none"})
U3D_ENUM_NAMES(Activation, {Activation::kRelu, "relu"}, {Activation::kLeakyRelu, "leaky_relu"},
               {Activation::kGelu, "gelu"}, {Activation::kElu, "elu"})
U3D_ENUM_NAMES(Architecture, {Architecture::kUNet, "unet"}, {Architecture::kResEncUNet, "resenc_unet"},
               {Architecture::kOpenKbpBaseline, "openkbp_baseline"}, {Architecture::kMlperfUNet3d, "mlperf_unet3d"})
U3D_ENUM_NAMES(ModelPreset, {ModelPreset::kNone, "none"}, {ModelPreset::kResEncM, "resenc_m"},
               {ModelPreset::kResEncL, "resenc_l"}, {ModelPreset::kResEncXL, "resenc_xl"},
               {ModelPreset::kMlperfUNet3d, "mlperf_unet3d"}, {ModelPreset::kUNet2d, "unet2d"})
U3D_ENUM_NAMES(Checkpointing, {Checkpointing::kOff, "off"}, {Checkpointing::kEncoder, "encoder"},
               {Checkpointing::kAll, "all"})
U3D_ENUM_NAMES(OutputActivation, {OutputActivation::kNone, "none"}, {OutputActivation::kRelu, "relu"},
               {OutputActivation::kSigmoid, "sigmoid"})
U3D_ENUM_NAMES(OptimizerKind, {OptimizerKind::kAdam, "adam"}, {OptimizerKind::kAdamW, "adamw"},
               {OptimizerKind::kSgd, "sgd"})
U3D_ENUM_NAMES(ScheduleKind, {ScheduleKind::kConstant, "constant"}, {ScheduleKind::kCosine, "cosine"},
               {ScheduleKind::kPoly, "poly"})
U3D_ENUM_NAMES(LossKind, {LossKind::kAuto, "auto"}, {LossKind::kL1, "l1"}, {LossKind::kMaskedL1, "masked_l1"},
               {LossKind::kMse, "mse"}, {LossKind::kMaskedMse, "masked_mse"}, {LossKind::kDiceCe, "dice_ce"},
               {LossKind::kCe, "ce"}, {LossKind::kBce, "bce"})
U3D_ENUM_NAMES(Head, {Head::kSoftmax, "softmax"}, {Head::kSigmoid, "sigmoid"})
U3D_ENUM_NAMES(Monitor, {Monitor::kAuto, "auto"}, {Monitor::kValLoss, "val_loss"}, {Monitor::kValMetric, "val_metric"},
               {Monitor::kValDoseScore, "val_dose_score"}, {Monitor::kValDvhScore, "val_dvh_score"},
               {Monitor::kPseudoDice, "pseudo_dice"}, {Monitor::kPseudoDiceEma, "pseudo_dice_ema"})
U3D_ENUM_NAMES(CachePlacement, {CachePlacement::kAuto, "auto"}, {CachePlacement::kGpu, "gpu"},
               {CachePlacement::kPinned, "pinned"}, {CachePlacement::kMemory, "memory"})
U3D_ENUM_NAMES(Tta, {Tta::kNone, "none"}, {Tta::kFlips, "flips"})
U3D_ENUM_NAMES(ProgressMode, {ProgressMode::kAuto, "auto"}, {ProgressMode::kBar, "bar"},
               {ProgressMode::kLines, "lines"}, {ProgressMode::kOff, "off"})
U3D_ENUM_NAMES(SaveErrorPolicy, {SaveErrorPolicy::kStop, "stop"}, {SaveErrorPolicy::kContinue, "continue"})
U3D_ENUM_NAMES(Precision, {Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"},
               {Precision::kFp16, "fp16"})
U3D_ENUM_NAMES(Toggle, {Toggle::kAuto, "auto"}, {Toggle::kOn, "on"}, {Toggle::kOff, "off"})
U3D_ENUM_NAMES(DistBackend, {DistBackend::kAuto, "auto"}, {DistBackend::kNccl, "nccl"}, {DistBackend::kGloo, "gloo"})
#undef U3D_ENUM_NAMES

template <class E>
std::string enum_name(E v) {
  for (const auto& [value, name] : EnumNames<E>::get()) {
    if (value == v) return name;
  }
  return "?";
}
template <class E>
std::string enum_choices() {
  std::vector<std::string> names;
  for (const auto& entry : EnumNames<E>::get()) names.push_back(entry.second);
  return fmt::format("{}", fmt::join(names, "|"));
}

// ---------------------------------------------------------------------------------------------
[[noreturn]] inline void fail(const std::string& where, const std::string& key, const std::string& what) {
  throw ConfigError(fmt::format("{}: {}: {}", where, key, what));
}

inline std::string where_of(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return source;
  return fmt::format("{}:{}:{}", source, mark.line + 1, mark.column + 1);
}

// A YAML double-quoted scalar: quotes, backslashes and control characters escaped, so to_yaml()
// reads back the same value (a newline used to break the config round trip).
inline std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

inline std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return quote(n.Scalar());
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

// ---------------------------------------------------------------------------------------------
// Value codecs: parse a YAML node (with the key and position for messages) and format a value as
// YAML flow text.
template <class T, class Enable = void>
struct Codec;

template <>
struct Codec<int64_t> {
  static std::string type() { return "integer"; }
  static int64_t parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && ptr == s.data() + s.size() && !s.empty()) return v;
    }
    fail(where, key, fmt::format("expected an integer, got {}", shown(n)));
  }
  static std::string format(int64_t v) { return std::to_string(v); }
};

template <>
struct Codec<double> {
  static std::string type() { return "number"; }
  static double parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(v)) {
        // Numbers reach the model and the optimizer as float32: outside its range they overflow
        // (or round to 0) there, at run time.
        if (std::abs(v) > std::numeric_limits<float>::max()) {
          fail(where, key,
               fmt::format("{} is beyond the float32 range (at most {:g} in magnitude)", s,
                           std::numeric_limits<float>::max()));
        }
        if (v != 0 && std::abs(v) < std::numeric_limits<float>::min()) {
          fail(where, key,
               fmt::format("{} is below the float32 range (rounds to 0; at least {:g} in magnitude, or 0)", s,
                           std::numeric_limits<float>::min()));
        }
        return v;
      }
    }
    fail(where, key, fmt::format("expected a finite number, got {}", shown(n)));
  }
  static std::string format(double v) {
    std::string s = fmt::format("{}", v);  // shortest text that reads back to the same double
    return s;
  }
};

template <>
struct Codec<bool> {
  static std::string type() { return "true|false"; }
  static bool parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (n.IsScalar()) {
      const std::string s = to_lower(n.Scalar());
      if (s == "true" || s == "yes" || s == "on") return true;
      if (s == "false" || s == "no" || s == "off") return false;
    }
    fail(where, key, fmt::format("expected true or false, got {}", shown(n)));
  }
  static std::string format(bool v) { return v ? "true" : "false"; }
};

template <>
struct Codec<std::string> {
  static std::string type() { return "string"; }
  static std::string parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (n.IsNull()) return "";
    if (n.IsScalar()) return n.Scalar();
    fail(where, key, fmt::format("expected a string, got {}", shown(n)));
  }
  static std::string format(const std::string& v) { return quote(v); }
};

template <class E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static std::string type() { return enum_choices<E>(); }
  static E parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (n.IsScalar()) {
      for (const auto& [value, name] : EnumNames<E>::get()) {
        if (name == n.Scalar()) return value;
      }
    }
    fail(where, key, fmt::format("{} is not allowed; expected one of {}", shown(n), enum_choices<E>()));
  }
  static std::string format(E v) { return enum_name(v); }
};

template <class T>
struct Codec<std::vector<T>> {
  static std::string type() { return "list of " + Codec<T>::type(); }
  static std::vector<T> parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    std::vector<T> out;
    if (n.IsNull()) return out;
    if (n.IsScalar()) return {Codec<T>::parse(n, where, key)};  // one value: a list of one
    if (!n.IsSequence()) fail(where, key, fmt::format("expected a list, got {}", shown(n)));
    for (const auto& item : n) out.push_back(Codec<T>::parse(item, where, key));
    return out;
  }
  static std::string format(const std::vector<T>& v) {
    std::vector<std::string> parts;
    for (const auto& x : v) parts.push_back(Codec<T>::format(x));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
};

// training.loss: a name (auto, l1, ..., dice_ce, bce) or a list of terms, NAME or {name: NAME, weight: W}.
inline const std::vector<std::string>& loss_term_names() {
  static const std::vector<std::string> names = {"ce", "dice",      "cldice", "skeleton_recall", "boundary", "bce",
                                                 "l1", "masked_l1", "mse",    "masked_mse"};
  return names;
}
template <>
struct Codec<LossSpec> {
  static std::string type() { return enum_choices<LossKind>() + " or a list of names or {name, weight}"; }
  static LossSpec parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    if (!n.IsSequence()) return LossSpec(Codec<LossKind>::parse(n, where, key));
    LossSpec spec;
    const auto& names = loss_term_names();
    const std::string choices = fmt::format("{}", fmt::join(names, "|"));
    for (const auto& item : n) {
      if (!item.IsScalar() && (!item.IsMap() || !item["name"])) {
        fail(where, key, fmt::format("each entry is a name or {{name: {}, weight: W}}, got {}", choices, shown(item)));
      }
      LossTerm term;  // a bare name: weight 1
      const YAML::Node entry = item;
      term.name = Codec<std::string>::parse(entry.IsScalar() ? entry : entry["name"], where, key);
      if (std::find(names.begin(), names.end(), term.name) == names.end()) {
        fail(where, key, fmt::format("term '{}' is not one of {}", term.name, choices));
      }
      if (item.IsMap() && item["weight"])
        term.weight = Codec<double>::parse(item["weight"], where, key + "." + term.name + ".weight");
      if (term.weight < 0)
        fail(where, key, fmt::format("term '{}' has weight {}; expected >= 0", term.name, term.weight));
      for (const auto& other : entry.IsMap() ? entry : YAML::Node(YAML::NodeType::Map)) {
        const std::string field = other.first.as<std::string>();
        if (field != "name" && field != "weight") {
          fail(where, key, fmt::format("term '{}': unknown field '{}' (expected name, weight)", term.name, field));
        }
      }
      for (const auto& seen : spec.terms) {
        if (seen.name == term.name) fail(where, key, fmt::format("term '{}' is listed twice", term.name));
      }
      spec.terms.push_back(term);
    }
    if (spec.terms.empty()) fail(where, key, "an empty list; name at least one term, or a loss such as dice_ce");
    return spec;
  }
  static std::string format(const LossSpec& v) {
    if (!v.is_list()) return Codec<LossKind>::format(v.kind);
    std::vector<std::string> parts;
    for (const auto& t : v.terms)
      parts.push_back(fmt::format("{{name: {}, weight: {}}}", t.name, Codec<double>::format(t.weight)));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  }
};

template <>
struct Codec<Shape3> {
  static std::string type() { return "3 integers (D, H, W) or one"; }
  static Shape3 parse(const YAML::Node& n, const std::string& where, const std::string& key) {
    const auto v = Codec<std::vector<int64_t>>::parse(n, where, key);
    if (v.size() == 1) return {v[0], v[0], v[0]};
    if (v.size() == 3) return {v[0], v[1], v[2]};
    fail(where, key, fmt::format("expected 3 integers (D, H, W) or one, got {} values", v.size()));
  }
  static std::string format(const Shape3& v) { return fmt::format("[{}, {}, {}]", v[0], v[1], v[2]); }
};

}  // namespace u3d::config_detail
