#include "u3d/monitor/metrics_csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

constexpr double kNaN = NAN;

// Comma-separated fields, blanks around each removed; NaN where empty or not a whole number
// (strtod reads "nan", "inf", "-inf").
std::vector<std::string> split_fields(std::string_view line) {
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t comma = std::min(line.find(',', start), line.size());
    const std::string_view f = line.substr(start, comma - start);
    const size_t first = std::min(f.find_first_not_of(" \t"), f.size());
    fields.emplace_back(f.substr(first, f.find_last_not_of(" \t") + 1 - first));
    if (comma == line.size()) return fields;
    start = comma + 1;
  }
}

double parse_value(const std::string& field) {
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  return field.empty() || *end != '\0' ? kNaN : v;
}

// The one reading of a metrics file (the writer's resume and read_metrics_csv): its lines split at
// '\n', kept as they are ('\r' included), and whether the last one ended with its '\n' (an append
// cut short by a crash does not). IoError naming the path when it cannot be read.
struct MetricsLines {
  std::vector<std::string> lines;
  bool last_complete = true;
};

MetricsLines read_metrics_lines(const std::filesystem::path& path) {
  const std::string text = read_file(path);
  MetricsLines out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) {
      out.lines.push_back(text.substr(pos));
      out.last_complete = false;
      break;
    }
    out.lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace

MetricsCsv::MetricsCsv(std::filesystem::path path, std::vector<std::string> columns)
    : path_(std::move(path)), columns_(std::move(columns)) {}

void MetricsCsv::start_fresh() {
  std::string header;
  for (size_t i = 0; i < columns_.size(); ++i) header += (i ? "," : "") + columns_[i];
  write_file_atomic(path_, header + "\n");
}

void MetricsCsv::resume(int64_t keep_through_epoch) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    start_fresh();
    return;
  }
  const MetricsLines file = read_metrics_lines(path_);
  const std::string header = file.lines.empty() ? std::string() : file.lines.front();
  std::string expected;
  for (size_t i = 0; i < columns_.size(); ++i) expected += (i ? "," : "") + columns_[i];
  if (header != expected) {
    throw IoError(
        fmt::format("{}: header '{}' differs from this run's columns '{}'", path_.string(), header, expected));
  }
  std::string kept = header + "\n";
  // Only complete lines (ending in '\n') with the right number of fields count.
  for (size_t i = 1; i < file.lines.size(); ++i) {
    if (i + 1 == file.lines.size() && !file.last_complete) break;  // partial last line from a crash: dropped
    const std::string& line = file.lines[i];
    if (static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1 != columns_.size()) continue;
    const auto epoch = parse_int(line.substr(0, line.find(',')));
    if (epoch && *epoch <= keep_through_epoch) kept += line + "\n";
  }
  write_file_atomic(path_, kept);
}

void MetricsCsv::append(const std::map<std::string, std::string>& values) {
  std::string row;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i) row += ',';
    const auto it = values.find(columns_[i]);
    if (it != values.end()) row += it->second;
  }
  std::ofstream out(path_, std::ios::app);
  out << row << '\n';
  out.flush();
  if (!out) throw IoError(fmt::format("{}: cannot append a row", path_.string()));
}

MetricsTable read_metrics_csv(const std::filesystem::path& path) {
  const MetricsLines file = read_metrics_lines(path);  // IoError naming the path
  const std::string name = path.string();
  MetricsTable table;
  size_t epoch_col = 0;
  for (size_t i = 0; i < file.lines.size(); ++i) {
    const size_t line_no = i + 1;
    std::string line = file.lines[i];
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (table.columns.empty()) {  // the header
      table.columns = split_fields(line);
      table.values.assign(table.columns.size(), {});
      epoch_col = std::find(table.columns.begin(), table.columns.end(), "epoch") - table.columns.begin();
      if (epoch_col == table.columns.size()) {
        throw IoError(
            fmt::format("{}: line {}: no \"epoch\" column in the header (expected metrics.csv)", name, line_no));
      }
      continue;
    }
    if (i + 1 == file.lines.size() && !file.last_complete) break;  // a row cut short by a crash
    const auto fields = split_fields(line);
    if (fields.size() != table.columns.size()) {
      throw IoError(fmt::format("{}: line {}: {} fields, expected {} as in the header", name, line_no, fields.size(),
                                table.columns.size()));
    }
    const double epoch = parse_value(fields[epoch_col]);
    if (!std::isfinite(epoch)) {
      throw IoError(fmt::format("{}: line {}: epoch \"{}\" is not a number", name, line_no, fields[epoch_col]));
    }
    while (table.rows() > 0 && table.values[epoch_col].back() >= epoch) {  // resumed from an earlier epoch
      for (auto& column : table.values) column.pop_back();
    }
    for (size_t c = 0; c < fields.size(); ++c) table.values[c].push_back(parse_value(fields[c]));
  }
  if (table.columns.empty())
    throw IoError(fmt::format("{}: empty, expected a header line with an \"epoch\" column", name));
  return table;
}

}  // namespace u3d
