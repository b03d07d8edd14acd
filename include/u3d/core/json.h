// JSON the program writes and reads, all through nlohmann-json (never format strings): values are
// built as `Json` (nlohmann::ordered_json: members keep the order they were added in) and written
// by json_line(), one line in the layout of Python's json.dumps (", " between items, ": " after
// keys), so stdout lines, metadata and files read as before; json_file_text() lays a file out a
// member per line; parse_json() reads with a DataError naming the file.
//
//   json_line(Json{{"patch", {64, 64, 32}}, {"device", "cpu"}})  -> {"patch": [64, 64, 32], "device": "cpu"}
//   json_number(0.123456, 4) -> 0.1235;  json_number(NAN, 4) -> null
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace u3d {

using Json = nlohmann::ordered_json;

// `value` on one line, Python's json.dumps layout; strings escaped by nlohmann-json (invalid UTF-8
// replaced by U+FFFD).
std::string json_line(const Json& value);
// A file's JSON: an object's members (or an array's items) one per line, a member that is a list
// of objects one object per line, everything else as json_line(); ends in '\n'.
std::string json_file_text(const Json& value);
// `v` rounded to `decimals`, or null when not measured (NaN).
Json json_number(double v, int decimals);
// `v`, or null when negative (not measured).
Json json_count(int64_t v);
// Parses JSON text; DataError "<source>: not valid JSON: ..." otherwise.
Json parse_json(const std::string& text, const std::string& source);

}  // namespace u3d
