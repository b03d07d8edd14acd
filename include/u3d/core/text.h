// Text helpers shared by the CLI and the config: splitting a separated list and parsing numbers
// strictly (the whole text must be the number; no stray characters, no overflow), sizes as text
// and finding a name in a list of channel names.
//
//   split("a,,b")                    -> {"a", "", "b"}      (split("") -> {""})
//   parse_int_list("64x64x32", "x")  -> {64, 64, 32}
//   parse_double_list("1.5,abc")     -> nullopt
//   shape_text(t.sizes())            -> "(1, 16, 16, 8)";  shape_text(patch, ShapeStyle::kCross) -> "16x16x8"
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
// Whether `text` ends with `suffix` (C++20's ends_with; an empty suffix: true).
bool ends_with(std::string_view text, std::string_view suffix);
// `text` as a JSON string literal, quotes included (", \ and control characters escaped; nlohmann-json).
std::string json_string(const std::string& text);

// Sizes as text: kTuple "(1, 16, 16, 8)" (a tensor's shape in messages), kCross "16x16x8" (a patch or
// a volume, as written on the command line). Any container of integers (torch::IntArrayRef, Shape3).
enum class ShapeStyle { kTuple, kCross };
std::string shape_text(const std::vector<int64_t>& sizes, ShapeStyle style = ShapeStyle::kTuple);
template <class Sizes>
std::string shape_text(const Sizes& sizes, ShapeStyle style = ShapeStyle::kTuple) {
  return shape_text(std::vector<int64_t>(sizes.begin(), sizes.end()), style);
}

// The position of `name` among channel names (a dataset's or the network's inputs), or nullopt.
std::optional<int64_t> find_channel(const std::vector<std::string>& names, const std::string& name);
// Same, ConfigError "<key>: channel '<name>' is not <among>; it has: a, b" when absent
// (among: "in the dataset", "an input channel").
int64_t channel_index(const std::vector<std::string>& names, const std::string& name, const std::string& key,
                      const std::string& among);

}  // namespace u3d
