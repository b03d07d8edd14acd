// Text helpers shared by the CLI and the config: splitting a separated list and parsing numbers
// strictly (the whole text must be the number; no stray characters, no overflow).
//
//   split("a,,b")                    -> {"a", "", "b"}      (split("") -> {""})
//   parse_int_list("64x64x32", "x")  -> {64, 64, 32}
//   parse_double_list("1.5,abc")     -> nullopt
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace u3d {

// The items between any of `separators`, empty items kept.
std::vector<std::string> split(std::string_view text, std::string_view separators = ",");
// Base-10 integer / finite decimal number, or nullopt.
std::optional<int64_t> parse_int(std::string_view text);
std::optional<double> parse_double(std::string_view text);
// Every item of split(text, separators) parsed; nullopt when any item is not a number.
std::optional<std::vector<int64_t>> parse_int_list(std::string_view text, std::string_view separators = ",");
std::optional<std::vector<double>> parse_double_list(std::string_view text, std::string_view separators = ",");
// `text` with ASCII letters in lower case (file extensions, names matched without case).
std::string to_lower(std::string_view text);
// `text` as a JSON string literal, quotes included (", \ and control characters escaped).
std::string json_string(const std::string& text);

}  // namespace u3d
