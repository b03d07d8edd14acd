#include "u3d/core/text.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

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

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace u3d
