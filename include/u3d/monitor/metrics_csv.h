// <run>/metrics.csv (and steps.csv): the one writer (MetricsCsv) and the one reader
// (read_metrics_csv) of the run's per-epoch table. The run log writes it (monitor/run_log.h); the
// progress plot, TensorBoard and `trainer export` read it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace u3d {

// <run>/metrics.csv: one row per epoch, fixed columns chosen when the run starts.
//
// Rows are appended and flushed as they are written. Opening an existing file for a resumed run
// keeps the rows whose epoch is <= `keep_through_epoch` and drops the rest (the rows written after
// the checkpoint the run resumes from), so the file never holds a duplicated or a missing epoch;
// a partial last line left by a crash is dropped too. The rewrite is atomic.
class MetricsCsv {
 public:
  MetricsCsv(std::filesystem::path path, std::vector<std::string> columns);
  // Starts a fresh file (a new run); replaces what was there.
  void start_fresh();
  // Keeps rows with epoch <= keep_through_epoch; a different header is an IoError.
  void resume(int64_t keep_through_epoch);
  // Appends one row; `values` maps column name to text; absent columns are left empty.
  void append(const std::map<std::string, std::string>& values);
  const std::filesystem::path& path() const { return path_; }
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  std::filesystem::path path_;
  std::vector<std::string> columns_;
};

// metrics.csv as columns of doubles: values[col][row], NaN where a field is empty or not a number
// ("nan"/"inf" text parses to NaN/Inf). read_metrics_csv() gives rows in increasing epoch order.
struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<std::vector<double>> values;  // values[col][row]

  // The column named `name`, nullptr when the file has none.
  const std::vector<double>* column(const std::string& name) const {
    for (size_t c = 0; c < columns.size() && c < values.size(); ++c) {
      if (columns[c] == name) return &values[c];
    }
    return nullptr;
  }
  size_t rows() const { return values.empty() ? 0 : values.front().size(); }
};

// Reads `path`. A last line without its newline (a crash mid-write) is ignored, as are blank lines
// and '\r'. A row whose epoch is <= an earlier row's (a resume from an earlier checkpoint that did
// not truncate the file) replaces the rows from that epoch on, so epochs increase strictly.
// IoError naming the file when it cannot be read, is empty or has no "epoch" column, and naming
// the file and line for a row with the wrong number of fields or an epoch that is not a number.
MetricsTable read_metrics_csv(const std::filesystem::path& path);

}  // namespace u3d
