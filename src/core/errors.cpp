#include "u3d/core/errors.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <filesystem>

namespace u3d {
namespace {

// `text` on one line: control characters (a newline or a tab in a path, an escape sequence) written
// as \n, \t, \x1b, so the message stays one line and shows the name as it is.
std::string escape_controls(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

// Our messages (and std::filesystem's, which hold paths) are one line by construction: a newline in
// them comes from a name (a path, a key) and is shown escaped, the rest of the message kept. A
// library's text (LibTorch, anything else) is cut at its first line: its further lines are its
// backtrace or context.
std::string error_line(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) {
    const std::string what = c10e->what_without_backtrace();
    return what.substr(0, what.find('\n'));
  }
  if (dynamic_cast<const Error*>(&e) || dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    std::string what = e.what();
    const auto backtrace = what.find("\nException raised from");  // a LibTorch message wrapped in ours
    return escape_controls(what.substr(0, backtrace));
  }
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace u3d
