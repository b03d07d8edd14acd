// read_file() of core/files.h: the whole of a text file, checked first by check_input_file
// (core/input_limits.h: no device, FIFO or folder; at most kMaxTextFileBytes). Apart from files.cpp
// because input_limits sits above files (its messages use human_bytes, its memory check
// host_available_bytes), and this is the one part of files that uses input_limits.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"

namespace u3d {

std::string read_file(const fs::path& path) {
  check_input_file(path, kMaxTextFileBytes, "a text file");  // no device, FIFO or folder; a sane size
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open for reading", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(fmt::format("{}: read failed", path.string()));
  return ss.str();
}

}  // namespace u3d
