#include "u3d/core/json.h"

#include <fmt/format.h>

#include <cmath>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

void append_line(const Json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, member] : v.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(key).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
      out += ": ";
      append_line(member, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      append_line(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  }
}

}  // namespace

std::string json_line(const Json& value) {
  std::string out;
  append_line(value, out);
  return out;
}

std::string json_file_text(const Json& value) {
  auto member_text = [](const Json& v) {
    const bool objects = v.is_array() && !v.empty() && v.front().is_object();
    if (!objects) return json_line(v);
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ",\n    " : "\n    ") + json_line(v[i]);
    return out + "\n  ]";
  };
  if (!value.is_object() && !value.is_array()) return json_line(value) + "\n";
  std::string out = value.is_object() ? "{" : "[";
  size_t i = 0;
  for (const auto& [key, member] : value.items()) {
    out += i++ ? ",\n  " : "\n  ";
    if (value.is_object()) out += json_line(Json(key)) + ": ";
    out += member_text(member);
  }
  return out + (value.is_object() ? "\n}\n" : "\n]\n");
}

Json json_number(double v, int decimals) {
  if (!std::isfinite(v)) return nullptr;
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

Json json_count(int64_t v) { return v >= 0 ? Json(v) : Json(nullptr); }

Json parse_json(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // nlohmann's text without its tag "[json.exception.parse_error.101] ": where and what, one line.
    const std::string what = e.what();
    const auto tag = what.rfind("] ", what.find("parse error"));
    throw DataError(
        fmt::format("{}: not valid JSON: {}", source, tag == std::string::npos ? what : what.substr(tag + 2)));
  }
}

}  // namespace u3d
