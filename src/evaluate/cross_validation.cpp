#include "u3d/evaluate/cross_validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"
#include "u3d/data/folds.h"
#include "u3d/evaluate/metrics.h"

namespace u3d {
namespace {

// A score as a fold writes it: a number, or "nan" (or nothing) where the metric is undefined (the
// Dice of a case without foreground predicted empty); nullopt for anything else.
std::optional<double> parse_score(const std::string& field) {
  if (field.empty() || to_lower(field) == "nan") return std::numeric_limits<double>::quiet_NaN();
  return parse_double(field);
}

// Fold k's CSV; each case must be one of the fold's held-out cases `val`, scored once.
FoldResult read_fold(int64_t fold, const std::filesystem::path& csv, const std::vector<std::string>& val,
                     std::string& metric) {
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
  const std::set<std::string> held_out(val.begin(), val.end());
  std::set<std::string> seen;
  FoldResult r;
  r.fold = fold;
  r.held_out = static_cast<int64_t>(held_out.size());
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& fields = rows[i].fields;
    if (fields.size() == 1 && fields[0].empty()) continue;
    if (fields[0] == "mean") continue;
    const auto v = fields.size() >= 2 ? parse_score(fields[1]) : std::nullopt;
    if (!v) {
      throw DataError(fmt::format("{}: line {}: expected 'case,<number or nan>,...'", csv.string(), rows[i].line));
    }
    if (!held_out.count(fields[0])) {
      throw DataError(fmt::format(
          "{}: line {}: case '{}' is not a held-out case of fold {} in folds.json (predicted with other folds?)",
          csv.string(), rows[i].line, fields[0], fold));
    }
    if (!seen.insert(fields[0]).second) {
      throw DataError(fmt::format("{}: line {}: case '{}' is scored twice", csv.string(), rows[i].line, fields[0]));
    }
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
  // The folds of the experiment are those of its folds.json (data/folds.h), never whatever fold_K
  // folders lie beside it.
  const auto folds_path = experiment / "folds.json";
  if (!std::filesystem::is_regular_file(folds_path, ec)) {
    throw DataError(
        fmt::format("{}: not found; the folds of a cross-validation are those it lists (`trainer --fold` "
                    "writes it)",
                    folds_path.string()));
  }
  const std::vector<FoldSplit> folds = folds_from_json(read_file(folds_path), folds_path.string());
  CvSummary s;
  for (const auto& e : std::filesystem::directory_iterator(experiment, ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("fold_", 0) != 0 || !e.is_directory(ec)) continue;
    const auto k = parse_int(name.substr(5));  // fold_01, fold_2_old, fold_7 of 5 folds: not a listed fold
    if (!k || *k < 0 || *k >= static_cast<int64_t>(folds.size()) || name != fmt::format("fold_{}", *k)) {
      s.stray.push_back(name);
    }
  }
  std::sort(s.stray.begin(), s.stray.end());
  std::vector<double> all, means;
  for (size_t k = 0; k < folds.size(); ++k) {
    const auto csv = experiment / fmt::format("fold_{}", k) / "predictions" / "val_metrics.csv";
    if (!std::filesystem::exists(csv, ec)) {
      s.missing.push_back(static_cast<int64_t>(k));
      continue;
    }
    s.folds.push_back(read_fold(static_cast<int64_t>(k), csv, folds[k].val, s.metric));
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
  for (const auto& f : s.folds) {
    if (static_cast<int64_t>(f.cases.size()) < f.held_out) {
      out += fmt::format("fold {}: {} of its {} held-out cases scored (the others: no target, or skipped)\n", f.fold,
                         f.cases.size(), f.held_out);
    }
  }
  for (int64_t k : s.missing) out += fmt::format("fold {}: no val_metrics.csv (not finished?)\n", k);
  for (const auto& name : s.stray) {
    out += fmt::format("{}: not one of the {} folds of folds.json (fold_0 .. fold_{}); left out of the means\n", name,
                       s.folds.size() + s.missing.size(), s.folds.size() + s.missing.size() - 1);
  }
  return out;
}

}  // namespace u3d
