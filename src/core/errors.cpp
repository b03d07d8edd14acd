#include "u3d/core/errors.h"

#include <c10/util/Exception.h>

namespace u3d {

std::string error_line(const std::exception& e) {
  const auto* c10e = dynamic_cast<const c10::Error*>(&e);
  const std::string what = c10e ? c10e->what_without_backtrace() : e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace u3d
