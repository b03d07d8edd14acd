#include "u3d/evaluate/surface_eval.h"

#include <fmt/format.h>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/parallel.h"
#include "u3d/evaluate/segmentation_eval.h"

namespace u3d {

SurfaceEvaluation evaluate_surface_folders(const SurfaceEvalOptions& o) {
  const std::vector<LabelPair> pairs = match_label_files(o.reference, o.predictions, o.only_predicted);
  const int64_t n = static_cast<int64_t>(pairs.size());
  SurfaceEvaluation e;
  e.cases.resize(pairs.size());
  parallel_for(n, resolve_threads(o.threads), [&](int64_t i) {
    const LabelPair& pair = pairs[static_cast<size_t>(i)];
    NiftiVolume p, r;
    read_label_pair(pair, p, r);
    try {
      // The labels as read (no cast): 256 or -1 must be refused as what they are, not wrapped into 0..255.
      e.cases[static_cast<size_t>(i)] = {pair.id, score_surface(p.data, r.data, o.tolerance, o.ignore_label)};
    } catch (const DataError& err) {  // which file holds the value score_surface refused
      throw DataError(
          fmt::format("{} (reference {}): {}", pair.prediction.string(), pair.reference.string(), err.what()));
    }
  });
  auto& m = e.mean;
  for (const auto& c : e.cases) {
    const auto& s = c.scores;
    m.surface_dice += s.surface_dice / static_cast<double>(n);
    m.voi_split += s.voi_split / static_cast<double>(n);
    m.voi_merge += s.voi_merge / static_cast<double>(n);
    m.voi += s.voi / static_cast<double>(n);
    m.voi_score += s.voi_score / static_cast<double>(n);
    m.topo_score += s.topo_score / static_cast<double>(n);
    m.total += s.total / static_cast<double>(n);
  }
  return e;
}

std::string surface_evaluation_csv(const SurfaceEvaluation& e) {
  auto g = [](double v) { return fmt::format("{:.6g}", v); };
  std::string out = csv_row({"case", "surface_dice", "voi_split", "voi_merge", "voi", "voi_score", "b0_pred", "b1_pred",
                             "b2_pred", "b0_ref", "b1_ref", "b2_ref", "topo_score", "total"});
  for (const auto& c : e.cases) {
    const auto& s = c.scores;
    out += csv_row({c.id, g(s.surface_dice), g(s.voi_split), g(s.voi_merge), g(s.voi), g(s.voi_score),
                    std::to_string(s.betti_pred[0]), std::to_string(s.betti_pred[1]), std::to_string(s.betti_pred[2]),
                    std::to_string(s.betti_ref[0]), std::to_string(s.betti_ref[1]), std::to_string(s.betti_ref[2]),
                    g(s.topo_score), g(s.total)});
  }
  const auto& m = e.mean;
  out += csv_row({"mean", g(m.surface_dice), g(m.voi_split), g(m.voi_merge), g(m.voi), g(m.voi_score), "", "", "", "",
                  "", "", g(m.topo_score), g(m.total)});
  return out;
}

std::string surface_evaluation_table(const SurfaceEvaluation& e) {
  std::string out = fmt::format("{:<16} {:>8} {:>8} {:>8} {:>11} {:>11} {:>7} {:>7}\n", "case", "SurfDice", "VOI",
                                "VOIscore", "betti pred", "betti ref", "topo", "total");
  for (const auto& c : e.cases) {
    const auto& s = c.scores;
    out += fmt::format("{:<16} {:>8.4f} {:>8.4f} {:>8.4f} {:>11} {:>11} {:>7.4f} {:>7.4f}\n", c.id, s.surface_dice,
                       s.voi, s.voi_score, fmt::format("{},{},{}", s.betti_pred[0], s.betti_pred[1], s.betti_pred[2]),
                       fmt::format("{},{},{}", s.betti_ref[0], s.betti_ref[1], s.betti_ref[2]), s.topo_score, s.total);
  }
  const auto& m = e.mean;
  out += fmt::format("{:<16} {:>8.4f} {:>8.4f} {:>8.4f} {:>11} {:>11} {:>7.4f} {:>7.4f}\n", "mean", m.surface_dice,
                     m.voi, m.voi_score, "", "", m.topo_score, m.total);
  return out;
}

}  // namespace u3d
