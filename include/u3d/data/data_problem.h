// One problem a data check found (data/preflight.h: the dataset checks; data/input_check.h: the
// normalised inputs): an error refuses the run, a warning is printed and the run goes on.
#pragma once
#include <string>

namespace u3d {

struct DataProblem {
  enum class Severity { kWarning, kError };
  Severity severity = Severity::kError;
  std::string case_id;  // empty: the whole file
  std::string field;    // "image", "target", "mask", "spacing", "splits" or empty
  std::string message;  // what is wrong, with the numbers
  bool is_error() const { return severity == Severity::kError; }
};

}  // namespace u3d
