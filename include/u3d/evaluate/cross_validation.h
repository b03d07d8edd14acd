// The summary of a cross-validation (`trainer evaluate cv EXPERIMENT_DIR`): each fold's validation
// metric, read from the held-out predictions the fold wrote after training
// (<experiment>/fold_K/predictions/val_metrics.csv: "case,<metric>,baseline_<metric>" rows and a
// "mean" row; "nan" where the metric is undefined, e.g. the Dice of a case without foreground
// predicted empty), and the pooled metric over every held-out case (each case once, as nnU-Net's
// cross-validation summary). The folds are those of <experiment>/folds.json (data/folds.h): a
// fold_K folder it does not list is left out (and named), and each fold's CSV may score only that
// fold's held-out cases.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace u3d {

struct FoldResult {
  int64_t fold = 0;
  std::vector<std::string> cases;
  std::vector<double> values;  // the metric per case (NaN where undefined)
  double mean = 0.0;           // nan_mean(values)
  int64_t held_out = 0;        // the fold's held-out cases in folds.json (cases without a target are not scored)
};

struct CvSummary {
  std::string metric;              // "dice" (segmentation) or "mae" (dose, target units)
  std::vector<FoldResult> folds;   // those found, by fold number
  std::vector<int64_t> missing;    // folds of folds.json without val_metrics.csv
  std::vector<std::string> stray;  // fold_* folders beside them that folds.json does not list (left out, named)
  double pooled = 0.0;             // nan_mean over every case of every fold
  double mean_of_folds = 0.0;      // mean of the folds' means
  double std_of_folds = 0.0;       // their population standard deviation
};

// Reads <experiment>/folds.json and the val_metrics.csv of each of its folds. DataError naming the
// file for a missing or malformed folds.json, a CSV that is not such a CSV, scores a case that is
// not one of its fold's held-out cases or a case twice, or when the folds disagree on the metric;
// DataError when no fold has one.
CvSummary summarize_cross_validation(const std::filesystem::path& experiment);
// "fold,cases,<metric>" rows, then "pooled" and "mean_of_folds" rows.
std::string cv_summary_csv(const CvSummary& s);
// The same as an aligned text table for the console.
std::string cv_summary_table(const CvSummary& s);

}  // namespace u3d
