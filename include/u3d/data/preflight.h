// Data preflight: every case read in full once and checked before anything trains on it, every
// problem named by file, case and field. `trainer check-data FILE` runs it on a whole file; every
// training run runs it on its train and validation cases (data.preflight) and refuses to start on
// an error; `--predict-only` runs it on the predicted split and skips the bad cases.
//
// Errors (the case cannot be used): a missing or unreadable field (truncated or corrupt HDF5 data),
// an image that is not (C, D, H, W) with C = channel_names, NaN or Inf voxels in the image or a
// regression target, a target or mask whose shape differs from the image's, labels outside
// 0..num_classes-1 or not integers, a spacing that is not three positive numbers, a field whose own
// spacing attribute differs from the case's; at file level: a file that does not open, a split
// naming a missing case.
// Warnings (usable, but worth a look): an empty target (all zero / background only) or an empty
// loss mask (the sampler and the masked losses handle both), a mask with values other than 0 and
// 1, a negative regression target, a missing spacing (1 mm assumed), a spacing far (more than 2x)
// from the dataset's median; for a training run (CheckedReader::check_inputs), an input channel
// nearly constant or far outside ±10 after normalisation (data/input_check.h).
#pragma once
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "u3d/data/data_problem.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

class Preprocessor;  // data/preprocess.h

struct DataReport {
  std::filesystem::path file;
  int64_t cases_checked = 0;
  std::vector<DataProblem> problems;  // file-level first, then by case id

  int64_t errors() const;
  int64_t warnings() const;
  std::set<std::string> bad_cases() const;  // cases with at least one error
  bool file_unusable() const;               // a file-level error
  // "<file>: case '<id>': '<field>': <message>" (without the parts that are empty).
  std::string describe(const DataProblem& p) const;
};

// Content checks of one case already read (NaN/Inf, shapes, labels, empty target/mask, spacing
// values), for a loader that reads each case once anyway.
std::vector<DataProblem> check_case_content(const CaseData& c, const DatasetInfo& info);

// Reads every case of `ids` (all cases of the file when empty) in full with `threads` threads and
// checks it. A file that does not open gives a report with one file-level error.
DataReport check_dataset(const std::filesystem::path& path, const std::vector<std::string>& ids = {},
                         int64_t threads = 1);

// The preflight folded into loading, so a training run reads each case once: read() reads a case
// field by field and checks it as check_dataset() does, records what it found, and hands the case
// on in DatasetReader::read_case's form (labels and masks uint8); a case with an error is refused
// with a DataError naming it. After a load that stopped at such an error, check_rest() checks the
// cases not read yet, so report() lists every problem. Thread-safe.
class CheckedReader {
 public:
  explicit CheckedReader(const DatasetReader& reader);  // keeps a reference
  ~CheckedReader();
  CheckedReader(const CheckedReader&) = delete;
  CheckedReader& operator=(const CheckedReader&) = delete;

  // Also checks what the network will see: each case read() without an error goes through
  // `pre`'s image() into an InputRangeCheck (data/input_check.h) whose warnings report() adds.
  // `specs`: data.normalize as resolved. Call before the first read(); keeps a reference to `pre`.
  void check_inputs(const Preprocessor& pre, const std::vector<std::string>& specs);
  CaseData read(const std::string& id);
  void check_rest(const std::vector<std::string>& ids, int64_t threads);
  // Every case read or checked so far, by case id, with the spacing-versus-median warnings.
  DataReport report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Logs every problem (errors at error level, warnings at warning level) and a summary line.
void log_report(const DataReport& report, const std::string& what);

}  // namespace u3d
