// Logging to the console and <run>/train.log (spdlog). metrics.csv: monitor/metrics_csv.h.
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

// A status line under the console's log lines (the progress bar, monitor/status_line.h): a log
// line clears it, prints, and draws it again below, so the two never collide. Only for a terminal
// (it uses a carriage return and the erase-line escape); "" removes it. train.log never sees it.
void set_status_line(const std::string& text);
// Whether stderr (the console log) is a terminal that understands escape codes (isatty, TERM not
// "dumb"), and its width in columns (80 when unknown).
bool console_is_terminal();
int console_columns();

}  // namespace u3d
