// `trainer import openkbp` and `trainer evaluate openkbp`.
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <memory>
#include <set>
#include <thread>

#include "u3d/app/commands.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/core/signals.h"
#include "u3d/evaluate/dose_metrics.h"
#include "u3d/io/h5/predictions_file.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// Predictions to score: a folder of <id>.csv submission files, or a predictions HDF5 file.
class PredictionSource {
 public:
  explicit PredictionSource(const fs::path& path) : path_(path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      for (const auto& e : fs::directory_iterator(path, ec)) {
        if (e.path().extension() == ".csv") ids_.insert(e.path().stem().string());
      }
      if (ids_.empty()) throw UsageError(fmt::format("evaluate openkbp: no <patient>.csv files in {}", path.string()));
      return;
    }
    if (!fs::exists(path, ec))
      throw UsageError(fmt::format("evaluate openkbp: --predictions {} not found", path.string()));
    file_ = std::make_unique<PredictionsReader>(path);
    if (file_->task() != Task::kDose) {
      throw DataError(
          fmt::format("{}: holds segmentation predictions; OpenKBP scores need dose predictions", path.string()));
    }
    ids_ = file_->ids();
  }
  bool is_submission() const { return !file_; }
  bool has(const std::string& id) const { return ids_.count(id) > 0; }
  const std::set<std::string>& ids() const { return ids_; }
  std::string describe(const std::string& id) const {
    return is_submission() ? (path_ / (id + ".csv")).string() : file_->describe(id);
  }
  // (128, 128, 128) float32 Gy.
  torch::Tensor read(const std::string& id) const {
    if (is_submission()) return openkbp::read_dose_csv(path_ / (id + ".csv"));
    return file_->prediction(id, torch::kFloat);
  }

 private:
  fs::path path_;
  std::unique_ptr<PredictionsReader> file_;  // null: a folder of submission CSV files
  std::set<std::string> ids_;
};

fs::path default_scores_path(const fs::path& predictions) {
  fs::path p = predictions;
  if (p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::error_code ec;
  // runs/x/predictions/openkbp -> runs/x/predictions/openkbp_scores.csv;
  // runs/x/predictions/val.h5 -> runs/x/predictions/val_openkbp_scores.csv.
  if (fs::is_directory(p, ec)) return p.parent_path() / (p.filename().string() + "_scores.csv");
  return p.parent_path() / (p.stem().string() + "_openkbp_scores.csv");
}

}  // namespace

int import_openkbp_command(const ImportOpenKbpCommand& cmd) {
  openkbp::CsvImportOptions o;
  o.source = cmd.source;
  o.out = cmd.out;
  o.force = cmd.force;
  o.threads = cmd.threads;
  o.single_split = cmd.split;
  if (o.source.empty()) throw UsageError("import openkbp: --source DIR is required");
  const StopSignals signals;  // a stop between patients removes the staged file (StoppedError)
  const auto report = openkbp::import_dataset(o);
  std::vector<std::string> splits;
  for (const auto& [name, count] : report.patients_per_split) splits.push_back(fmt::format("{} {}", name, count));
  spdlog::info(
      "import openkbp: wrote {} ({} patients: {}; {} without dose) in {:.2f} s with {} threads; read {} of CSV "
      "({:.0f} MB/s), wrote {}",
      cmd.out, report.patients, fmt::join(splits, ", "), report.patients_without_dose, report.seconds, report.threads,
      human_bytes(static_cast<double>(report.csv_bytes)),
      static_cast<double>(report.csv_bytes) / 1e6 / std::max(report.seconds, 1e-9),
      human_bytes(static_cast<double>(report.output_bytes)));
  return kExitOk;
}

int evaluate_openkbp_command(const EvaluateOpenKbpCommand& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  if (cmd.reference.empty()) throw UsageError("evaluate openkbp: --reference DIR is required");
  if (cmd.predictions.empty()) throw UsageError("evaluate openkbp: --predictions PRED is required");
  const fs::path out = cmd.out.empty() ? default_scores_path(cmd.predictions) : fs::path(cmd.out);
  const fs::path dvh_out = out.parent_path() / (out.stem().string() + "_dvh.csv");
  std::error_code ec;
  for (const auto& p : {out, dvh_out}) {
    refuse_output_over_input("evaluate openkbp", "--out", p, {cmd.predictions, cmd.reference});
    if (fs::exists(p, ec) && !cmd.force) {
      throw UsageError(
          fmt::format("evaluate openkbp: {} exists; pass --force to replace it (or --out FILE.csv)", p.string()));
    }
  }
  const auto patients = openkbp::find_patients(cmd.reference);
  const PredictionSource predictions(cmd.predictions);
  std::vector<std::string> missing;
  for (const auto& p : patients) {
    if (!predictions.has(p.id)) missing.push_back(p.id);
  }
  if (!missing.empty()) {
    throw DataError(fmt::format("{}: no prediction for {} of the {} reference patients: {}", cmd.predictions,
                                missing.size(), patients.size(), fmt::join(missing, ", ")));
  }
  std::set<std::string> reference_ids;
  for (const auto& p : patients) reference_ids.insert(p.id);
  for (const auto& id : predictions.ids()) {
    if (!reference_ids.count(id))
      spdlog::warn("evaluate openkbp: {} has no reference patient; ignored", predictions.describe(id));
  }

  std::vector<DvhStructure> structures;
  for (const auto& name : openkbp::structure_names()) {
    const bool target = name.rfind("PTV", 0) == 0;
    structures.push_back({name, target ? DvhKind::kTarget : DvhKind::kOar, static_cast<int64_t>(structures.size())});
  }
  std::vector<PatientDoseMetrics> results(patients.size());
  parallel_for(static_cast<int64_t>(patients.size()), resolve_threads(cmd.threads), [&](int64_t k) {
    const auto i = static_cast<size_t>(k);
    const openkbp::Patient ref = openkbp::read_patient(patients[i].dir);
    if (!ref.dose.defined()) {
      throw DataError(fmt::format("{}: the reference patient has no dose.csv", patients[i].dir.string()));
    }
    torch::Tensor pred = predictions.read(patients[i].id);  // (128, 128, 128) float32 Gy
    if (pred.sizes() != ref.dose.sizes()) {
      throw DataError(fmt::format("{}: prediction is ({}); expected (128, 128, 128)",
                                  predictions.describe(patients[i].id), fmt::join(pred.sizes(), ", ")));
    }
    // Network output from --predict-only: score what its submission file would hold.
    if (!predictions.is_submission()) pred = submission_dose(pred, ref.possible_dose_mask);
    results[i] =
        evaluate_patient_dose(ref.id, ref.dose, pred, ref.possible_dose_mask, ref.structures, structures, ref.spacing);
  });

  const DoseScores scores = dose_scores(results);
  if (!out.parent_path().empty()) ensure_writable_directory(out.parent_path());
  write_file_atomic(out, dose_metrics_by_patient_csv(results));
  write_file_atomic(dvh_out, dvh_entries_csv(results));
  for (const auto& r : results) {
    spdlog::info("evaluate openkbp: {} dose error {:.4f} Gy, DVH error {:.4f} Gy ({} metrics)", r.id, r.dose_error,
                 r.dvh_mean_abs_error(), r.dvh.size());
  }
  spdlog::info("evaluate openkbp: {} patients in {:.1f} s; per-patient scores in {}, DVH metrics in {}",
               scores.patients, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               out.string(), dvh_out.string());
  std::printf("dose score %.6f Gy\nDVH score %.6f Gy\n", scores.dose_score, scores.dvh_score);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace u3d
