#include "u3d/evaluate/cross_validation.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"
#include "u3d/evaluate/metrics.h"

namespace u3d {
namespace {

FoldResult read_fold(int64_t fold, const std::filesystem::path& csv, std::string& metric) {
  const auto rows = parse_csv(read_file(csv));
  const auto header = rows.empty() ? std::vector<std::string>{} : rows.front().fields;
  if (header.size() < 2 || header[0] != "case") {
    throw DataError(
        fmt::format("{}: expected a header 'case,<metric>,...' (a val_metrics.csv of --predict-only)", csv.string()));
  }
  if (!metric.empty() && header[1] != metric) {
    throw DataError(fmt::format("{}: scores {}, the other folds {}", csv.string(), header[1], metric));
  }
  metric = header[1];
  FoldResult r;
  r.fold = fold;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& fields = rows[i].fields;
    if (fields.size() == 1 && fields[0].empty()) continue;
    if (fields[0] == "mean") continue;
    const auto v = fields.size() >= 2 ? parse_double(fields[1]) : std::nullopt;
    if (!v) throw DataError(fmt::format("{}: line {}: expected 'case,<number>,...'", csv.string(), rows[i].line));
    r.cases.push_back(fields[0]);
    r.values.push_back(*v);
  }
  if (r.cases.empty()) throw DataError(fmt::format("{}: no cases", csv.string()));
  r.mean = nan_mean(r.values);
  return r;
}

}  // namespace

CvSummary summarize_cross_validation(const std::filesystem::path& experiment) {
  std::error_code ec;
  if (!std::filesystem::is_directory(experiment, ec)) {
    throw DataError(
        fmt::format("{}: not a folder (expected <output_dir>/<name> of a cross-validation)", experiment.string()));
  }
  std::map<int64_t, std::filesystem::path> found;
  for (const auto& e : std::filesystem::directory_iterator(experiment, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("fold_", 0) != 0) continue;
    const auto k = parse_int(name.substr(5));
    if (!k || *k < 0) continue;
    found[*k] = e.path() / "predictions" / "val_metrics.csv";
  }
  CvSummary s;
  std::vector<double> all, means;
  for (const auto& [k, csv] : found) {
    if (!std::filesystem::exists(csv, ec)) {
      s.missing.push_back(k);
      continue;
    }
    s.folds.push_back(read_fold(k, csv, s.metric));
    all.insert(all.end(), s.folds.back().values.begin(), s.folds.back().values.end());
    means.push_back(s.folds.back().mean);
  }
  if (s.folds.empty()) {
    throw DataError(
        fmt::format("{}: no fold_K/predictions/val_metrics.csv; train the folds first (trainer --config "
                    "X --fold all) or predict them (--predict-only --fold K)",
                    experiment.string()));
  }
  s.pooled = nan_mean(all);
  s.mean_of_folds = nan_mean(means);
  double ss = 0.0;
  for (double m : means) ss += (m - s.mean_of_folds) * (m - s.mean_of_folds);
  s.std_of_folds = std::sqrt(ss / static_cast<double>(means.size()));
  return s;
}

std::string cv_summary_csv(const CvSummary& s) {
  auto g = [](double v) { return fmt::format("{:.6g}", v); };
  std::string out = csv_row({"fold", "cases", s.metric});
  size_t cases = 0;
  for (const auto& f : s.folds) {
    out += csv_row({std::to_string(f.fold), std::to_string(f.cases.size()), g(f.mean)});
    cases += f.cases.size();
  }
  out += csv_row({"pooled", std::to_string(cases), g(s.pooled)});
  out += csv_row({"mean_of_folds", std::to_string(s.folds.size()), g(s.mean_of_folds)});
  return out;
}

std::string cv_summary_table(const CvSummary& s) {
  std::string out = fmt::format("{:<14} {:>6} {:>10}\n", "fold", "cases", s.metric);
  size_t cases = 0;
  for (const auto& f : s.folds) {
    out += fmt::format("{:<14} {:>6} {:>10.4f}\n", f.fold, f.cases.size(), f.mean);
    cases += f.cases.size();
  }
  out += fmt::format("{:<14} {:>6} {:>10.4f}\n", "pooled", cases, s.pooled);
  out += fmt::format("{:<14} {:>6} {:>10.4f} ± {:.4f} (std of the folds)\n", "mean of folds", s.folds.size(),
                     s.mean_of_folds, s.std_of_folds);
  for (int64_t k : s.missing) out += fmt::format("fold {}: no val_metrics.csv (not finished?)\n", k);
  return out;
}

}  // namespace u3d
