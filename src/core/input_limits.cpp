#include "u3d/core/input_limits.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <new>
#include <regex>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"

namespace u3d {

namespace fs = std::filesystem;

namespace {

const char* type_text(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory: return "a folder";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

std::string input_file_problem(const fs::path& path, int64_t max_bytes, std::string_view kind) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // follows symbolic links
  if (status.type() == fs::file_type::not_found) {
    return fs::is_symlink(fs::symlink_status(path, ec)) ? "is a symbolic link to nothing (dangling)" : "not found";
  }
  if (ec) return fmt::format("cannot be examined: {}", ec.message());
  if (status.type() != fs::file_type::regular) {
    return fmt::format("is {}; expected {} (a regular file)", type_text(status.type()), kind);
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return fmt::format("cannot be examined: {}", ec.message());
  if (max_bytes >= 0 && size > static_cast<uintmax_t>(max_bytes)) {
    return fmt::format("is {}, more than the {} {} may hold", human_bytes(static_cast<double>(size)),
                       human_bytes(static_cast<double>(max_bytes)), kind);
  }
  return "";
}

int64_t check_input_file(const fs::path& path, int64_t max_bytes, std::string_view kind) {
  if (const std::string problem = input_file_problem(path, max_bytes, kind); !problem.empty()) {
    throw IoError(fmt::format("{}: {}", path.string(), problem));
  }
  std::error_code ec;
  return static_cast<int64_t>(fs::file_size(path, ec));
}

std::string declared_size_problem(const std::vector<int64_t>& shape, int64_t element_bytes,
                                  std::string_view type_name) {
  double bytes = static_cast<double>(element_bytes);
  for (const int64_t s : shape) bytes *= static_cast<double>(s);
  const int64_t available = host_available_bytes();
  if (available <= 0 || bytes <= static_cast<double>(available)) return "";
  return fmt::format(
      "declares shape [{}] ({} as {}), more than the {} of memory available; the file is damaged, or "
      "the volume is too large for this machine",
      fmt::join(shape, ", "), human_bytes(bytes), type_name, human_bytes(static_cast<double>(available)));
}

void check_declared_size(const std::string& what, const std::vector<int64_t>& shape, int64_t element_bytes,
                         std::string_view type_name) {
  if (const std::string problem = declared_size_problem(shape, element_bytes, type_name); !problem.empty()) {
    throw DataError(fmt::format("{} {}", what, problem));
  }
}

std::optional<int64_t> host_allocation_failure(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e)) return 0;
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  if (!c10e) return std::nullopt;
  const std::string what = c10e->what_without_backtrace();
  if (what.find("DefaultCPUAllocator") == std::string::npos) return std::nullopt;
  static const std::regex asked(R"(allocate (\d+) bytes)");
  std::smatch m;
  if (!std::regex_search(what, m, asked)) return 0;
  return parse_int(m[1].str()).value_or(0);
}

}  // namespace u3d
