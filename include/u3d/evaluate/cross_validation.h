// The summary of a cross-validation (`trainer evaluate cv EXPERIMENT_DIR`): each fold's validation
// metric, read from the held-out predictions the fold wrote after training
// (<experiment>/fold_K/predictions/val_metrics.csv: "case,<metric>,baseline_<metric>" rows and a
// "mean" row), and the pooled metric over every held-out case (each case once, as nnU-Net's
// cross-validation summary).
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
};

struct CvSummary {
  std::string metric;             // "dice" (segmentation) or "mae" (dose, target units)
  std::vector<FoldResult> folds;  // those found, by fold number
  std::vector<int64_t> missing;   // fold numbers below the largest found without val_metrics.csv
  double pooled = 0.0;            // nan_mean over every case of every fold
  double mean_of_folds = 0.0;     // mean of the folds' means
  double std_of_folds = 0.0;      // their population standard deviation
};

// Reads every <experiment>/fold_K/predictions/val_metrics.csv. DataError naming the file for one
// that is not such a CSV, or when the folds disagree on the metric; DataError when no fold has one.
CvSummary summarize_cross_validation(const std::filesystem::path& experiment);
// "fold,cases,<metric>" rows, then "pooled" and "mean_of_folds" rows.
std::string cv_summary_csv(const CvSummary& s);
// The same as an aligned text table for the console.
std::string cv_summary_table(const CvSummary& s);

}  // namespace u3d
