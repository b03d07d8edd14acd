#include "u3d/core/text.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "u3d/core/errors.h"
#include "u3d/core/json.h"

namespace u3d {

std::vector<std::string> split(std::string_view text, std::string_view separators) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t cut = text.find_first_of(separators, pos);
    out.emplace_back(text.substr(pos, cut == std::string_view::npos ? std::string_view::npos : cut - pos));
    if (cut == std::string_view::npos) return out;
    pos = cut + 1;
  }
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::optional<double> parse_double(std::string_view text) {
  const std::string s(text);  // strtod needs a terminated string (std::from_chars for double: GCC 11+)
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

namespace {

template <class T>
std::optional<std::vector<T>> parse_list(std::string_view text, std::string_view separators,
                                         std::optional<T> (*parse)(std::string_view)) {
  std::vector<T> out;
  for (const auto& item : split(text, separators)) {
    const auto v = parse(item);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

}  // namespace

std::optional<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view separators) {
  return parse_list<int64_t>(text, separators, parse_int);
}

std::optional<std::vector<double>> parse_double_list(std::string_view text, std::string_view separators) {
  return parse_list<double>(text, separators, parse_double);
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string json_string(const std::string& text) { return json_line(Json(text)); }

std::string shape_text(const std::vector<int64_t>& sizes, ShapeStyle style) {
  if (style == ShapeStyle::kCross) return fmt::format("{}", fmt::join(sizes, "x"));
  return fmt::format("({})", fmt::join(sizes, ", "));
}

std::optional<int64_t> find_channel(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<int64_t>(it - names.begin());
}

int64_t channel_index(const std::vector<std::string>& names, const std::string& name, const std::string& key,
                      const std::string& among) {
  if (const auto i = find_channel(names, name)) return *i;
  throw ConfigError(fmt::format("{}: channel '{}' is not {}; it has: {}", key, name, among, fmt::join(names, ", ")));
}

}  // namespace u3d
