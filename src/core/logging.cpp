#include "u3d/core/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

constexpr const char* kPattern = "[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v";
// Lines logged before the run folder exists (configuration, data loading), replayed into train.log
// when add_log_file() attaches it.
constexpr size_t kEarlyLines = 4096;
using EarlySink = spdlog::sinks::ringbuffer_sink_mt;

std::shared_ptr<spdlog::logger> main_logger() {
  auto logger = spdlog::get("u3d");
  if (!logger) {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    console->set_pattern(kPattern);
    logger = std::make_shared<spdlog::logger>(
        "u3d", spdlog::sinks_init_list{console, std::make_shared<EarlySink>(kEarlyLines)});
    spdlog::register_logger(logger);
    spdlog::set_default_logger(logger);
  }
  return logger;
}

}  // namespace

void init_console_logging(const std::string& level) {
  auto logger = main_logger();
  const auto lvl = spdlog::level::from_str(level);
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
}

void add_log_file(const std::filesystem::path& log_file) {
  auto logger = main_logger();
  auto& sinks = logger->sinks();
  // Keep the console sink (always first); drop a previous file sink, or the early lines' buffer
  // after replaying it into the new file.
  std::shared_ptr<EarlySink> early = sinks.size() > 1 ? std::dynamic_pointer_cast<EarlySink>(sinks[1]) : nullptr;
  try {
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file.string(), /*truncate=*/false);
    file->set_pattern(kPattern);
    if (early) {
      for (const auto& line : early->last_raw()) file->log(line);
    }
    while (sinks.size() > 1) sinks.pop_back();
    sinks.push_back(file);
  } catch (const spdlog::spdlog_ex& e) {
    throw IoError(fmt::format("{}: cannot open log file: {}", log_file.string(), e.what()));
  }
}

void flush_logs() {
  if (auto logger = spdlog::get("u3d")) logger->flush();
}

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
  const std::string text = read_file(path_);
  std::istringstream in(text);
  std::string line;
  std::string header;
  std::getline(in, header);
  std::string expected;
  for (size_t i = 0; i < columns_.size(); ++i) expected += (i ? "," : "") + columns_[i];
  if (header != expected) {
    throw IoError(
        fmt::format("{}: header '{}' differs from this run's columns '{}'", path_.string(), header, expected));
  }
  std::string kept = header + "\n";
  // Only complete lines (ending in '\n') with the right number of fields count.
  size_t pos = header.size() + 1;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // partial last line from a crash: dropped
    line = text.substr(pos, end - pos);
    pos = end + 1;
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

}  // namespace u3d
