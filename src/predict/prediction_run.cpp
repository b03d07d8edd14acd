#include "u3d/predict/prediction_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_head.h"
#include "u3d/data/cache.h"
#include "u3d/data/input_check.h"
#include "u3d/data/preflight.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/io/openkbp/openkbp.h"
#include "u3d/model/layout.h"
#include "u3d/predict/ensemble.h"
#include "u3d/predict/openkbp_submission.h"
#include "u3d/predict/prediction_output.h"
#include "u3d/predict/predictor.h"

namespace u3d {
namespace {

// Removes every file of an earlier prediction of `split` in `dir` (predictions/), so that the
// folder only ever holds one set, from one checkpoint: <split>.h5, <split>_metrics.csv,
// <split>_skipped.csv, <split>_outputs.txt, the NIfTI folder <split>/ and, for OpenKBP data,
// openkbp/; also staged files of a killed earlier run (".<name>.partial.<pid>", pid gone).
void remove_previous_outputs(const std::filesystem::path& dir, const std::string& split, bool openkbp_data) {
  remove_stale_temporaries(dir);
  std::error_code ec;
  for (const auto& name : {split + ".h5", split + "_metrics.csv", split + "_skipped.csv", split + "_outputs.txt"}) {
    std::filesystem::remove(dir / name, ec);
  }
  std::filesystem::remove_all(dir / split, ec);
  if (openkbp_data) std::filesystem::remove_all(dir / "openkbp", ec);
}

// Preflight: the cases of rp.ids without errors; the others are listed in <split>_skipped.csv (its
// file name added to `outputs`). Removes the earlier prediction's outputs first.
std::vector<std::string> usable_cases(const ResolvedPrediction& rp, const DatasetReader& reader,
                                      const std::filesystem::path& out_dir, int64_t threads,
                                      std::vector<std::string>& outputs) {
  const Config& cfg = rp.cfg;
  const DataReport report = check_dataset(cfg.data.path, rp.ids, threads);
  log_report(report, "predict preflight");
  if (report.file_unusable()) throw DataError(report.describe(report.problems.front()));
  const auto bad = report.bad_cases();
  std::vector<std::string> ids;
  for (const auto& id : rp.ids) {
    if (!bad.count(id)) ids.push_back(id);
  }
  ensure_writable_directory(out_dir);
  // One set of outputs per split: nothing of an earlier prediction (another checkpoint, other
  // skipped cases) stays beside the new files.
  remove_previous_outputs(out_dir, cfg.predict.split, openkbp::is_openkbp_dataset(reader.info()));
  if (!bad.empty()) {
    std::string skipped = csv_row({"case", "field", "problem"});
    for (const auto& p : report.problems) {
      if (p.is_error() && !p.case_id.empty()) skipped += csv_row({p.case_id, p.field, p.message});
    }
    const auto skipped_path = out_dir / (cfg.predict.split + "_skipped.csv");
    write_file_atomic(skipped_path, skipped);
    outputs.push_back(skipped_path.filename().string());
    spdlog::warn("predict: skipping {} of {} case(s) with errors: {} (listed in {}); predicting the others", bad.size(),
                 rp.ids.size(), fmt::join(bad, ", "), skipped_path.string());
  }
  if (ids.empty()) {
    throw DataError(fmt::format("{}: every case of split '{}' has errors (listed above); nothing to predict",
                                cfg.data.path, cfg.predict.split));
  }
  return ids;
}

}  // namespace

Network load_prediction_network(const ResolvedPrediction& rp, const torch::Device& device) {
  std::vector<Network> nets;
  for (const auto& m : rp.members) {
    Network net =
        build_network(m.trained.model, m.info.in_channels, network_channels(m.trained.model.head, m.info.out_channels));
    net->to(device);
    load_checkpoint(m.checkpoint, *net, nullptr, device, /*restore_rng=*/false);
    set_layout(*net, rp.channels_last);
    spdlog::info("predict: checkpoint {} (epoch {}, step {})", m.checkpoint.string(), m.info.state.epoch,
                 m.info.state.global_step);
    nets.push_back(net);
  }
  if (nets.size() == 1) return nets.front();
  spdlog::info("predict: ensemble of {} models ({})", nets.size(),
               rp.task() != Task::kSegmentation          ? "mean output"
               : rp.trained.model.head == Head::kSigmoid ? "mean sigmoid probabilities"
                                                         : "mean softmax probabilities");
  return EnsembleNetwork(nets, rp.task(), rp.trained.model.head).ptr();
}

void predict_split(const ResolvedPrediction& rp, const DatasetReader& reader, const std::filesystem::path& out_dir,
                   const Runtime& rt) {
  const Config& cfg = rp.cfg;
  const Preprocessor& pre = *rp.pre;
  Network net = load_prediction_network(rp, rt.device);
  std::vector<std::string> outputs;  // file names of this set, for <split>_outputs.txt
  const std::vector<std::string> ids = usable_cases(rp, reader, out_dir, rt.threads, outputs);
  const SlidingWindowOptions& sw = rp.window;
  spdlog::info("predict: forward passes in {}, {}", sw.autocast ? c10::toString(*sw.autocast) : "float32",
               rp.channels_last ? "channels-last" : "contiguous");

  const auto out_path = out_dir / (cfg.predict.split + ".h5");
  PredictionWriter writer(out_path, reader.info(), cfg.data.path, rp.checkpoint_list);
  // OpenKBP data: also the challenge's submission files, <run>/predictions/openkbp/<id>.csv.
  std::unique_ptr<openkbp::SubmissionWriter> submission;
  if (openkbp::is_openkbp_dataset(reader.info())) {
    submission = std::make_unique<openkbp::SubmissionWriter>(out_dir / "openkbp");
  }
  const bool seg = pre.task() == Task::kSegmentation;
  const std::string metric = seg ? "dice" : "mae";
  std::string csv = csv_row({"case", metric, "baseline_" + metric});
  std::vector<double> values, baselines;
  int64_t nifti_files = 0;
  // The training preflight's normalisation check (data/input_check.h) on the first case, as the
  // checkpoint's data.normalize leaves it: a mistake there shows before the rest is predicted.
  InputRangeCheck inputs(pre.channel_names(), rp.trained.data.normalize);
  bool inputs_checked = false;
  for (const auto& id : ids) {
    // One case in memory at a time, normalised by the run's Preprocessor; its outputs are streamed
    // slab by slab (prediction_output.h).
    const TensorCache one = TensorCache::load(reader, {id}, pre, /*threads=*/1);
    const CachedCase& c = one[0];
    if (!inputs_checked) {
      inputs_checked = true;
      inputs.add(c.image);
      DataReport r;
      r.file = cfg.data.path;
      for (const auto& w : inputs.warnings()) spdlog::warn("predict preflight (case {}): {}", c.id, r.describe(w));
    }
    CaseOutputOptions oo = writer.begin(c);
    oo.probabilities = cfg.predict.probabilities && seg;
    oo.postprocess = rp.post;
    for (int64_t k = 1; seg && k < reader.info().num_classes; ++k) {  // ROI names of an RT Structure Set
      const auto& names = reader.info().class_names;
      oo.class_names.push_back(static_cast<size_t>(k) < names.size() ? names[static_cast<size_t>(k)]
                                                                     : fmt::format("class_{}", k));
    }
    oo.keep_prediction = submission != nullptr;
    if (cfg.predict.nifti) {
      auto source = reader.read_source(id);
      if (source && writes_source_file(*source)) {  // in the format the case was imported from
        oo.source_file = out_dir / cfg.predict.split / (id + source->file_ending);
        oo.geometry = std::move(source);
        ++nifti_files;
      }
    }
    CaseOutputSink sink(c, pre, std::move(oo), rp.train_mean);
    sliding_window_predict(*net, c.image, sw, rt.device, sink);
    const CaseScore score = sink.finish();
    if (submission) submission->write(c.id, score.prediction, c.mask);
    if (!c.target.defined()) continue;
    const double v = score.value, b = score.baseline;
    values.push_back(v);
    baselines.push_back(b);
    csv += csv_row({c.id, fmt::format("{:.6g}", v), fmt::format("{:.6g}", b)});
    spdlog::info("predict: {} {} {:.4f} (baseline {:.4f})", c.id, metric, v, b);
  }
  writer.commit(cfg.predict.split);
  outputs.push_back(out_path.filename().string());
  spdlog::info("predict: wrote {} ({} cases)", out_path.string(), ids.size());
  if (nifti_files > 0) outputs.push_back(cfg.predict.split + "/");
  if (nifti_files > 0) {
    spdlog::info(
        "predict: wrote {} file(s) in the inputs' formats (NIfTI, TIFF, PNG, RT Dose) with their geometry "
        "into {}",
        nifti_files, (out_dir / cfg.predict.split).string());
  }
  if (submission && submission->files() > 0) {
    submission->commit();
    outputs.push_back("openkbp/");
    spdlog::info("predict: wrote {} OpenKBP submission files (prediction x possible-dose mask) to {}",
                 submission->files(), (out_dir / "openkbp").string());
  }
  if (!values.empty()) {
    csv += csv_row({"mean", fmt::format("{:.6g}", nan_mean(values)), fmt::format("{:.6g}", nan_mean(baselines))});
    const auto csv_path = out_dir / (cfg.predict.split + "_metrics.csv");
    write_file_atomic(csv_path, csv);
    outputs.push_back(csv_path.filename().string());
    const std::string units = seg ? "" : (" " + reader.info().target_units);
    spdlog::info("predict: {} split mean {} {:.4f}{} | baseline ({}) {:.4f}{}", cfg.predict.split, metric,
                 nan_mean(values), units, seg ? "all background" : "predict the training mean", nan_mean(baselines),
                 units);
  }
  const CheckpointInfo& info = rp.members.front().info;
  const auto manifest = out_dir / (cfg.predict.split + "_outputs.txt");
  write_file_atomic(manifest, fmt::format("checkpoint: {}\nepoch: {}\nglobal_step: {}\nfiles: {}\n", rp.checkpoint_list,
                                          info.state.epoch, info.state.global_step, fmt::join(outputs, " ")));
  spdlog::info("predict: outputs of checkpoint {} (epoch {}): {} (listed in {})", rp.checkpoint_list, info.state.epoch,
               fmt::join(outputs, ", "), manifest.string());
}

}  // namespace u3d
