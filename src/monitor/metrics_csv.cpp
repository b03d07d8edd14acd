#include "u3d/monitor/metrics_csv.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

constexpr double kNaN = NAN;

// A CSV row's fields (core/csv.h) with the blanks around each removed.
std::vector<std::string> trimmed_fields(const CsvRow& row) {
  std::vector<std::string> fields;
  for (const std::string& f : row.fields) {
    const size_t first = std::min(f.find_first_not_of(" \t"), f.size());
    fields.push_back(f.substr(first, f.find_last_not_of(" \t") + 1 - first));
  }
  return fields;
}

// NaN where empty or not a whole number (strtod reads "nan", "inf", "-inf").
double parse_value(const std::string& field) {
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  return field.empty() || *end != '\0' ? kNaN : v;
}

}  // namespace

MetricsCsv::MetricsCsv(std::filesystem::path path, std::vector<std::string> columns)
    : path_(std::move(path)), columns_(std::move(columns)) {}

void MetricsCsv::start_fresh() { write_file_atomic(path_, csv_row(columns_)); }

void MetricsCsv::resume(int64_t keep_through_epoch) {
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    start_fresh();
    return;
  }
  const auto rows = parse_csv(read_file(path_));
  const std::vector<std::string> header = rows.empty() ? std::vector<std::string>{} : rows.front().fields;
  // A file of an earlier version may lack columns added since (val_seconds, dice_<class>): its rows
  // keep their values and leave the new columns empty. A column this run does not have is an error.
  std::vector<size_t> at;  // header column i -> this run's column at[i]
  for (const auto& column : header) {
    at.push_back(static_cast<size_t>(std::find(columns_.begin(), columns_.end(), column) - columns_.begin()));
  }
  if (header.empty() || header.front() != columns_.front() || std::count(at.begin(), at.end(), columns_.size()) > 0 ||
      std::set<size_t>(at.begin(), at.end()).size() != at.size()) {
    throw IoError(fmt::format("{}: header '{}' differs from this run's columns '{}'", path_.string(),
                              fmt::join(header, ","), fmt::join(columns_, ",")));
  }
  std::string kept = csv_row(columns_);
  // Only complete rows (ending in '\n') with the right number of fields count; a partial last
  // row from a crash is dropped.
  for (size_t i = 1; i < rows.size(); ++i) {
    if (!rows[i].complete || rows[i].fields.size() != header.size()) continue;
    const auto epoch = parse_int(rows[i].fields[0]);
    if (!epoch || *epoch > keep_through_epoch) continue;
    std::vector<std::string> row(columns_.size());
    for (size_t c = 0; c < header.size(); ++c) row[at[c]] = rows[i].fields[c];
    kept += csv_row(row);
  }
  write_file_atomic(path_, kept);
}

void MetricsCsv::append(const std::map<std::string, std::string>& values) {
  std::vector<std::string> row;
  for (const auto& column : columns_) {
    const auto it = values.find(column);
    row.push_back(it != values.end() ? it->second : std::string());
  }
  std::ofstream out(path_, std::ios::app);
  out << csv_row(row);
  out.flush();
  if (!out) throw IoError(fmt::format("{}: cannot append a row", path_.string()));
}

MetricsTable read_metrics_csv(const std::filesystem::path& path) {
  const auto rows = parse_csv(read_file(path));  // IoError naming the path
  const std::string name = path.string();
  MetricsTable table;
  size_t epoch_col = 0;
  for (const CsvRow& row : rows) {
    const auto fields = trimmed_fields(row);
    const size_t line_no = row.line;
    if (fields.size() == 1 && fields[0].empty()) continue;
    if (table.columns.empty()) {  // the header
      table.columns = fields;
      table.values.assign(table.columns.size(), {});
      epoch_col = std::find(table.columns.begin(), table.columns.end(), "epoch") - table.columns.begin();
      if (epoch_col == table.columns.size()) {
        throw IoError(
            fmt::format("{}: line {}: no \"epoch\" column in the header (expected metrics.csv)", name, line_no));
      }
      continue;
    }
    if (!row.complete) break;  // a last line without its newline: a row cut short by a crash
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
