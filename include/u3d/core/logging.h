// Logging to the console and <run>/train.log (spdlog), and the per-epoch metrics CSV.
#pragma once
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace u3d {

// Console logger (stderr) at `level` (trace|debug|info|warn|error). Safe to call again.
void init_console_logging(const std::string& level = "info");
// Adds (or replaces) a file sink writing every message to `log_file` (appending).
void add_log_file(const std::filesystem::path& log_file);
// Flushes all sinks (before exit, after each epoch).
void flush_logs();

// A status line under the console's log lines (the progress bar, train/progress_display.h): a log
// line clears it, prints, and draws it again below, so the two never collide. Only for a terminal
// (it uses a carriage return and the erase-line escape); "" removes it. train.log never sees it.
void set_status_line(const std::string& text);
// Whether stderr (the console log) is a terminal that understands escape codes (isatty, TERM not
// "dumb"), and its width in columns (80 when unknown).
bool console_is_terminal();
int console_columns();

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

}  // namespace u3d
