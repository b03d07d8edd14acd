// Private to src/io: the case files an importer found, before anything is read. The two NIfTI
// layouts (nnU-Net raw, plain folders) become one Layout, which run_import (import_nifti.cpp) reads,
// checks and writes as dataset format v1. Also the label checks, the val selection and the end
// (progress, splits, commit) every importer shares.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "u3d/io/h5/dataset.h"
#include "u3d/io/import.h"

namespace u3d::import_detail {

namespace fs = std::filesystem;

struct CaseFiles {
  std::string id;
  std::vector<fs::path> channels;  // one file per channel, in channel order
  std::optional<fs::path> label;
};

struct Layout {
  DatasetInfo info;                   // task, channel names, classes
  std::vector<CaseFiles> labelled;    // -> train / val
  std::vector<CaseFiles> unlabelled;  // -> test
  std::set<int64_t> declared;         // label values allowed; empty: discover them
};

// An nnU-Net raw dataset folder (dataset.json, imagesTr/, labelsTr/, imagesTs/). DataError naming
// the file for a missing or malformed part.
Layout nnunet_layout(const fs::path& source);

// The regular, non-hidden files of `dir` that `accept` takes, by stem. DataError for a missing folder,
// a listing error, or two accepted files of one stem: "A and B: <duplicate(stem)>; keep one" (A, B sorted).
std::map<std::string, fs::path> files_by_stem(const fs::path& dir, const std::function<bool(const fs::path&)>& accept,
                                              const std::function<std::string(const std::string&)>& duplicate);
// Plain NIfTI folders (images, optional labels, channel suffixes). UsageError for contradicting
// flags, DataError naming the file for a missing channel or label file.
Layout nifti_folders_layout(const NiftiFolders& folders);

// The label values present in a label volume, ascending. DataError naming `file` for NaN or Inf,
// non-integer, negative or > 255 values.
std::vector<int64_t> label_values(const torch::Tensor& labels, const fs::path& file);

// A case id (is_valid_case_id) made of a free-form name, e.g. a DICOM PatientID: characters other
// than letters, digits, `_ - .` become `_`, `prefix` goes before an empty id or one that begins with
// `.` ("../x" -> "patient.._x"), and an id over kMaxCaseIdChars keeps its first characters and ends
// in `_` and 8 hex digits of the name's SHA-256, so that every file named after it (plus ".dcm",
// ".nii.gz" or a staging suffix) stays a valid file name and two long names stay apart.
constexpr size_t kMaxCaseIdChars = 200;
std::string case_id_from(const std::string& name, const std::string& prefix);

// Labelled case ids into 'train' and 'val': round(n * val_fraction) cases to 'val', at least 1 when
// val_fraction > 0 and at most n - 1, chosen by `seed` (the same ids and seed: the same split).
void split_cases(const std::vector<std::string>& ids, double val_fraction, uint64_t seed,
                 std::vector<std::string>& train, std::vector<std::string>& val);

// The one end of every importer (import_nifti.cpp, import_tiff.cpp, image2d_import.cpp, dicom_import.cpp;
// openkbp.cpp, whose splits are its folders, ends in commit_splits alone):
// the cases are written in order with a progress line, the splits drawn, the normalisation recorded,
// and the file committed.
class ImportProgress {  // "import: i/n cases" at most every 10 s, and at the last case
 public:
  explicit ImportProgress(int64_t cases);
  void written(int64_t i);  // case i (0-based) is in the file

 private:
  int64_t cases_;
  std::chrono::steady_clock::time_point last_;
};

struct Splits {
  std::vector<std::string> train, val, test;
};
// 'train' and 'val' drawn from the labelled ids (split_cases), 'test' the unlabelled ones.
Splits labelled_splits(const std::vector<std::string>& labelled, std::vector<std::string> unlabelled,
                       double val_fraction, uint64_t seed);
// Split name -> case ids, in the order they are recorded.
using NamedSplits = std::vector<std::pair<std::string, std::vector<std::string>>>;

// The last step of every importer (the OpenKBP one included, whose splits are its folders): records
// each split in order, then commits the file (DatasetWriter::commit: rename into place).
void commit_splits(DatasetWriter& writer, const NamedSplits& splits);

// Records the channel normalisation and every non-empty split ('train' even when empty if
// `train_always`), then commits the file (commit_splits); the summary gets the split sizes.
template <class Summary>
void commit_import(DatasetWriter& writer, const Splits& splits, const std::vector<std::string>& normalization,
                   Summary& summary, bool train_always = false) {
  writer.set_channel_normalization(normalization);
  NamedSplits named;
  if (!splits.train.empty() || train_always) named.emplace_back("train", splits.train);
  if (!splits.val.empty()) named.emplace_back("val", splits.val);
  if (!splits.test.empty()) named.emplace_back("test", splits.test);
  commit_splits(writer, named);
  summary.train = static_cast<int64_t>(splits.train.size());
  summary.val = static_cast<int64_t>(splits.val.size());
  summary.test = static_cast<int64_t>(splits.test.size());
}

}  // namespace u3d::import_detail
