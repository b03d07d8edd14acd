// `trainer --predict-only`: the command around the predictor (predict/): the checkpoint and its
// config, the preflight of the split, the outputs of one prediction set and their manifest.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>

#include "u3d/app/commands.h"
#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/run.h"
#include "u3d/data/cache.h"
#include "u3d/data/folds.h"
#include "u3d/data/preflight.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/io/dataset.h"
#include "u3d/io/openkbp.h"
#include "u3d/model/unet.h"
#include "u3d/predict/ensemble.h"
#include "u3d/predict/openkbp_submission.h"
#include "u3d/predict/postprocess.h"
#include "u3d/predict/prediction_output.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/amp.h"
#include "u3d/train/checkpoint.h"
#include "u3d/train/resolve.h"
#include "u3d/train/train_step.h"

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

// One trained model of a prediction: its checkpoint and the config it was trained with.
struct Member {
  std::filesystem::path checkpoint;
  CheckpointInfo info;
  Config trained;
};

Member read_member(const std::filesystem::path& checkpoints, int64_t keep_last, const std::string& checkpoint) {
  const CheckpointStore store(checkpoints, keep_last);
  Member m;
  m.checkpoint = store.resolve(checkpoint);
  m.info = read_checkpoint_info(m.checkpoint);
  m.trained = load_config_from_string(m.info.config_yaml, m.checkpoint.string() + " (config)");
  return m;
}

// The cases of predict.split; with cross-validation (experiment.fold K), predict.split "val" (or
// data.val_split) means fold K's held-out cases (data/folds.h).
std::vector<std::string> cases_to_predict(const Config& cfg, const DatasetReader& reader) {
  const auto fold = fold_number(cfg);
  if (fold && (cfg.predict.split == "val" || cfg.predict.split == cfg.data.val_split)) {
    return load_folds(reader, cfg)[static_cast<size_t>(*fold)].val;
  }
  return split_ids(reader, "predict.split", cfg.predict.split);
}

// Predicts cfg.predict.split with the members (one: a single model; more: their EnsembleNetwork)
// into `out_dir`.
void predict_split(const Config& cfg, const std::vector<Member>& members, const std::filesystem::path& out_dir) {
  const Member& first = members.front();
  const auto& ckpt_path = first.checkpoint;
  const CheckpointInfo& info = first.info;
  // The network and its preprocessing come from the checkpoint's config; data.path and predict.*
  // from the config given now.
  const Config& trained = first.trained;
  const auto differences = diff(trained, cfg);
  const bool from_dataset =
      std::find(cfg.data.normalize.begin(), cfg.data.normalize.end(), "dataset") != cfg.data.normalize.end();
  for (const auto& d : differences) {
    if (from_dataset && d.rfind("data.normalize", 0) == 0) continue;  // resolved into the checkpoint at training
    if (d.rfind("model.", 0) == 0 || d.rfind("data.normalize", 0) == 0 || d.rfind("data.channels", 0) == 0 ||
        d.rfind("data.target_scale", 0) == 0) {
      spdlog::warn("predict: {} differs from the checkpoint; using the checkpoint's value", d);
    }
  }
  for (const auto& m : members) {  // one preprocessing and one window for every member
    const auto& a = trained.data;
    const auto& b = m.trained.data;
    if (m.info.in_channels != info.in_channels || m.info.out_channels != info.out_channels ||
        a.patch_size != b.patch_size || a.channels != b.channels || a.normalize != b.normalize ||
        a.target_scale != b.target_scale) {
      throw ConfigError(fmt::format(
          "ensemble: {} was trained with other inputs than {} (channels, data.normalize, data.target_scale or "
          "data.patch_size differ); an ensemble averages models of one preprocessing",
          m.checkpoint.string(), ckpt_path.string()));
    }
  }
  const Runtime rt = init_runtime(cfg);
  const auto dataset = open_dataset(cfg);  // ConfigError naming data.path
  const DatasetReader& reader = *dataset;
  const Preprocessor pre(trained.data, reader.info());
  if (pre.in_channels() != info.in_channels || pre.out_channels() != info.out_channels) {
    throw ConfigError(fmt::format("{}: the checkpoint expects {} input and {} output channels; {} gives {} and {}",
                                  ckpt_path.string(), info.in_channels, info.out_channels, cfg.data.path,
                                  pre.in_channels(), pre.out_channels()));
  }
  const PostprocessOptions post{cfg.predict.threshold, cfg.predict.min_component_size};
  check_postprocess(post, pre.task(), pre.out_channels());  // ConfigError naming the key
  if (post.threshold > 0 || post.min_component_size > 0) {
    spdlog::info("predict: labels post-processed: {}, components below {} voxel(s) removed",
                 post.threshold > 0 ? fmt::format("p(class 1) >= {}", post.threshold) : std::string("argmax"),
                 post.min_component_size);
  }
  const bool channels_last = resolve_channels_last(trained.model, rt.device);
  std::vector<Network> nets;
  std::vector<std::string> checkpoints;
  double train_mean = 0.0;  // the regression baseline: the members' mean training target
  for (const auto& m : members) {
    Network net = build_network(m.trained.model, m.info.in_channels, m.info.out_channels);
    net->to(rt.device);
    load_checkpoint(m.checkpoint, *net, nullptr, rt.device, /*restore_rng=*/false);
    set_layout(*net, channels_last);
    spdlog::info("predict: checkpoint {} (epoch {}, step {})", m.checkpoint.string(), m.info.state.epoch,
                 m.info.state.global_step);
    nets.push_back(net);
    checkpoints.push_back(m.checkpoint.string());
    train_mean += m.info.state.train_target_mean / static_cast<double>(members.size());
  }
  Network net = nets.front();
  if (members.size() > 1) {
    net = EnsembleNetwork(nets, pre.task()).ptr();
    spdlog::info("predict: ensemble of {} models ({})", nets.size(),
                 pre.task() == Task::kSegmentation ? "mean softmax probabilities" : "mean output");
  }
  const std::string checkpoint_list = fmt::format("{}", fmt::join(checkpoints, ","));

  // Preflight: a case with an error is skipped with a per-case report; the others are predicted.
  const auto ids_of_split = cases_to_predict(cfg, reader);
  const DataReport report = check_dataset(cfg.data.path, ids_of_split, rt.threads);
  log_report(report, "predict preflight");
  if (report.file_unusable()) throw DataError(report.describe(report.problems.front()));
  const auto bad = report.bad_cases();
  std::vector<std::string> ids;
  for (const auto& id : ids_of_split) {
    if (!bad.count(id)) ids.push_back(id);
  }
  ensure_writable_directory(out_dir);
  // One set of outputs per split: nothing of an earlier prediction (another checkpoint, other
  // skipped cases) stays beside the new files.
  remove_previous_outputs(out_dir, cfg.predict.split, openkbp::is_openkbp_dataset(reader.info()));
  std::vector<std::string> outputs;  // file names of this set, for <split>_outputs.txt
  if (!bad.empty()) {
    std::string skipped = csv_row({"case", "field", "problem"});
    for (const auto& p : report.problems) {
      if (p.is_error() && !p.case_id.empty()) skipped += csv_row({p.case_id, p.field, p.message});
    }
    const auto skipped_path = out_dir / (cfg.predict.split + "_skipped.csv");
    write_file_atomic(skipped_path, skipped);
    outputs.push_back(skipped_path.filename().string());
    spdlog::warn("predict: skipping {} of {} case(s) with errors: {} (listed in {}); predicting the others", bad.size(),
                 ids_of_split.size(), fmt::join(bad, ", "), skipped_path.string());
  }
  if (ids.empty()) {
    throw DataError(fmt::format("{}: every case of split '{}' has errors (listed above); nothing to predict",
                                cfg.data.path, cfg.predict.split));
  }
  SlidingWindowOptions sw{trained.data.patch_size,
                          cfg.predict.overlap,
                          cfg.predict.batch_size > 0 ? cfg.predict.batch_size : cfg.data.batch_size,
                          cfg.predict.gaussian,
                          /*mirror=*/cfg.predict.tta == Tta::kFlips,
                          /*autocast=*/inference_autocast(cfg.training, rt.device),
                          channels_last};
  spdlog::info("predict: forward passes in {}, {}", sw.autocast ? c10::toString(*sw.autocast) : "float32",
               channels_last ? "channels-last" : "contiguous");

  const auto out_path = out_dir / (cfg.predict.split + ".h5");
  PredictionWriter writer(out_path, reader.info(), cfg.data.path, checkpoint_list);
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
  for (const auto& id : ids) {
    // One case in memory at a time; its outputs are streamed slab by slab (prediction_output.h).
    const TensorCache one = TensorCache::load(reader, {id}, pre, /*threads=*/1);
    const CachedCase& c = one[0];
    CaseOutputOptions oo = writer.begin(c);
    oo.probabilities = cfg.predict.probabilities && seg;
    oo.postprocess = post;
    oo.keep_prediction = submission != nullptr;
    if (cfg.predict.nifti) {
      auto source = reader.read_source(id);
      if (source && source->format == "nifti") {
        oo.nifti_path = out_dir / cfg.predict.split / (id + source->file_ending);
        oo.geometry = std::move(source);
        ++nifti_files;
      }
    }
    CaseOutputSink sink(c, pre, std::move(oo), train_mean);
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
    spdlog::info("predict: wrote {} NIfTI files with the inputs' geometry into {}", nifti_files,
                 (out_dir / cfg.predict.split).string());
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
  const auto manifest = out_dir / (cfg.predict.split + "_outputs.txt");
  write_file_atomic(manifest, fmt::format("checkpoint: {}\nepoch: {}\nglobal_step: {}\nfiles: {}\n", checkpoint_list,
                                          info.state.epoch, info.state.global_step, fmt::join(outputs, " ")));
  spdlog::info("predict: outputs of checkpoint {} (epoch {}): {} (listed in {})", checkpoint_list, info.state.epoch,
               fmt::join(outputs, ", "), manifest.string());
}

}  // namespace

void run_prediction(const Config& cfg, const std::string& checkpoint) {
  const RunPaths paths(cfg);
  predict_split(cfg, {read_member(paths.checkpoints, cfg.checkpoint.keep_last, checkpoint)}, paths.predictions);
}

std::filesystem::path run_ensemble_prediction(const Config& cfg, const std::vector<std::string>& members,
                                              const std::string& checkpoint) {
  const auto experiment = std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name;
  std::vector<Member> models;
  for (const auto& name : members) {
    auto dir = std::filesystem::path(name);
    if (dir.is_relative() && !std::filesystem::exists(dir / "checkpoints")) dir = experiment / name;
    if (!std::filesystem::is_directory(dir / "checkpoints")) {
      throw ConfigError(fmt::format("--ensemble: {}: not a run folder (no checkpoints/ in {})", name, dir.string()));
    }
    models.push_back(read_member(dir / "checkpoints", cfg.checkpoint.keep_last, checkpoint));
  }
  const auto out_dir = experiment / "ensemble" / "predictions";
  predict_split(cfg, models, out_dir);
  return out_dir;
}

}  // namespace u3d
