#include "u3d/core/csv.h"

namespace u3d {

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    out += csv_field(fields[i]);
  }
  return out + "\n";
}

std::vector<CsvRow> parse_csv(std::string_view text) {
  std::vector<CsvRow> rows;
  size_t line = 1;
  size_t i = 0;
  while (i < text.size()) {
    CsvRow row;
    row.line = line;
    std::string field;
    bool quoted = false;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (quoted) {
        if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else if (c == '"') {
          quoted = false;
        } else {
          if (c == '\n') ++line;
          field += c;
        }
      } else if (c == '"') {
        quoted = true;
      } else if (c == ',') {
        row.fields.push_back(std::move(field));
        field.clear();
      } else if (c == '\n') {
        row.complete = true;
        ++line;
        ++i;
        break;
      } else {
        field += c;
      }
    }
    if (!field.empty() && field.back() == '\r') field.pop_back();
    row.fields.push_back(std::move(field));
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace u3d
