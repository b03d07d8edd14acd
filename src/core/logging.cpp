#include "u3d/core/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <spdlog/sinks/base_sink.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "u3d/core/csv.h"
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

// The console sink: stderr with colours, and the status line kept below the log lines.
class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ConsoleSink() : inner_(std::make_unique<spdlog::sinks::stderr_color_sink_st>()) {}
  void set_status(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (text.empty() && status_.empty()) return;
    status_ = text;
    std::fputs("\r\033[K", stderr);
    std::fputs(status_.c_str(), stderr);
    std::fflush(stderr);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!status_.empty()) std::fputs("\r\033[K", stderr);
    inner_->log(msg);
    if (!status_.empty()) {
      inner_->flush();
      std::fputs(status_.c_str(), stderr);
      std::fflush(stderr);
    }
  }
  void flush_() override { inner_->flush(); }
  void set_pattern_(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_->set_formatter(std::move(formatter));
  }

 private:
  std::unique_ptr<spdlog::sinks::stderr_color_sink_st> inner_;
  std::string status_;
};

std::shared_ptr<ConsoleSink>& console_sink() {
  static std::shared_ptr<ConsoleSink> sink = std::make_shared<ConsoleSink>();
  return sink;
}

// A sink that cannot write (train.log on a full disk): one warning line on the console, in our
// format, the first time; spdlog's own "[*** LOG ERROR ***]" block never reaches the user. The
// console sink comes first, so every line still reaches the console.
void on_sink_error(const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const auto colon = what.rfind(": ");  // spdlog: "Failed flush to file <path>: <strerror>"
    const std::string reason = colon == std::string::npos ? std::string("write failed") : what.substr(colon + 2);
    const std::string text =
        fmt::format("the log file cannot be written ({}); further log lines go to the console only", reason);
    console_sink()->log(spdlog::details::log_msg("u3d", spdlog::level::warn, text));
    console_sink()->flush();
  });
}

std::shared_ptr<spdlog::logger> main_logger() {
  auto logger = spdlog::get("u3d");
  if (!logger) {
    auto console = console_sink();
    console->set_pattern(kPattern);
    logger = std::make_shared<spdlog::logger>(
        "u3d", spdlog::sinks_init_list{console, std::make_shared<EarlySink>(kEarlyLines)});
    logger->set_error_handler(on_sink_error);
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

void set_status_line(const std::string& text) { console_sink()->set_status(text); }

bool console_is_terminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) == 1 && !(term != nullptr && std::string(term) == "dumb");
}

int console_columns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

void flush_logs() {
  if (auto logger = spdlog::get("u3d")) logger->flush();
}

}  // namespace u3d
