// CSV files, one convention for every file the program writes and reads (RFC 4180): fields
// separated by ',', rows ending in '\n'; a field holding a comma, a double quote, CR or LF is
// written in double quotes with each quote doubled, so names with commas stay one field.
//
//   csv_row({"case_1", "0.93"})        -> "case_1,0.93\n"
//   csv_row({"a,b", "say \"hi\""})     -> "\"a,b\",\"say \"\"hi\"\"\"\n"
//   parse_csv("a,b\n\"x,y\",2")         -> {{"a","b"}, line 1, complete}, {{"x,y","2"}, line 2, not complete}
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace u3d {

// One field as written: quoted when it holds ',', '"', '\r' or '\n'.
std::string csv_field(std::string_view text);
// One row: the fields quoted as needed, joined by ',', ending in '\n'.
std::string csv_row(const std::vector<std::string>& fields);

// One parsed row of a CSV text.
struct CsvRow {
  std::vector<std::string> fields;  // unquoted; a trailing '\r' of the row is dropped
  size_t line = 0;                  // 1-based line where the row starts
  bool complete = false;            // ended by '\n' (a last row without one may be cut short by a crash)
};
// Every row of `text`, blank lines included (one empty field); quoted fields may hold line breaks.
std::vector<CsvRow> parse_csv(std::string_view text);

}  // namespace u3d
