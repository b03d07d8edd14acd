#include "u3d/predictor.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "../data/h5.h"
#include "u3d/amp.h"
#include "u3d/cache.h"
#include "u3d/checkpoint.h"
#include "u3d/dataset.h"
#include "u3d/errors.h"
#include "u3d/files.h"
#include "u3d/metrics.h"
#include "u3d/preflight.h"
#include "u3d/openkbp.h"
#include "u3d/prediction_output.h"
#include "u3d/run.h"
#include "u3d/train_step.h"
#include "u3d/signals.h"

namespace u3d {

std::vector<int64_t> window_starts(int64_t size, int64_t patch, double overlap) {
  if (size <= patch) return {0};
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(patch) * (1.0 - overlap))));
  const int64_t n = static_cast<int64_t>(std::ceil(static_cast<double>(size - patch) / static_cast<double>(step))) + 1;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < n; ++i) {
    // Spread the windows evenly between 0 and size - patch (as nnU-Net does).
    starts.push_back(n == 1 ? 0 : static_cast<int64_t>(std::llround(static_cast<double>(i) * static_cast<double>(size - patch) / static_cast<double>(n - 1))));
  }
  return starts;
}

torch::Tensor gaussian_importance_map(const Shape3& patch, double sigma_fraction) {
  torch::Tensor map = torch::ones({1}, torch::kFloat);
  std::vector<torch::Tensor> axes;
  for (int a = 0; a < 3; ++a) {
    const double centre = (static_cast<double>(patch[a]) - 1.0) / 2.0;
    const double sigma = std::max(1e-3, static_cast<double>(patch[a]) * sigma_fraction);
    const auto x = torch::arange(patch[a], torch::kDouble);
    axes.push_back(torch::exp(-0.5 * ((x - centre) / sigma).square()));
  }
  auto g = axes[0].view({-1, 1, 1}) * axes[1].view({1, -1, 1}) * axes[2].view({1, 1, -1});
  g = g / g.max();
  const double floor = g.masked_select(g > 0).min().item<double>();
  return g.clamp_min(std::max(floor, 1e-6)).to(torch::kFloat);
}

std::vector<std::vector<int64_t>> mirror_combinations() {
  std::vector<std::vector<int64_t>> out;
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<int64_t> dims;
    for (int a = 0; a < 3; ++a) {
      if (mask & (1 << a)) dims.push_back(2 + a);
    }
    out.push_back(dims);
  }
  return out;
}

void sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& o,
                            const torch::Device& device, SlabSink& sink) {
  torch::NoGradGuard no_grad;
  const bool was_training = net.is_training();
  net.eval();
  // Pad axes smaller than the patch (at the end, with 0 = the mean of a z-scored channel).
  torch::Tensor x = image.to(device, torch::kFloat);
  const Shape3 shape = {x.size(1), x.size(2), x.size(3)};
  const Shape3 padded = {std::max(shape[0], o.patch[0]), std::max(shape[1], o.patch[1]), std::max(shape[2], o.patch[2])};
  if (padded != shape) {
    x = torch::constant_pad_nd(x, {0, padded[2] - shape[2], 0, padded[1] - shape[1], 0, padded[0] - shape[0]}, 0.0);
  }
  const auto zs = window_starts(padded[0], o.patch[0], o.overlap);
  const auto ys = window_starts(padded[1], o.patch[1], o.overlap);
  const auto xs = window_starts(padded[2], o.patch[2], o.overlap);
  std::vector<Shape3> origins;  // D-major: every window of a D start before the next start's
  for (auto z : zs)
    for (auto y : ys)
      for (auto w : xs) origins.push_back({z, y, w});

  const torch::Tensor weight = (o.gaussian ? gaussian_importance_map(o.patch) : torch::ones({o.patch[0], o.patch[1], o.patch[2]}))
                                   .to(device);  // (d, h, w)
  // Batches of windows. When a D start has at least a batch of windows, batches do not cross to
  // the next D start, so the rolling buffer needs only a patch depth of rows.
  const size_t bs = static_cast<size_t>(std::max<int64_t>(1, o.batch_size));
  const bool split_rows = ys.size() * xs.size() >= bs;
  std::vector<std::pair<size_t, size_t>> batches;  // [first, last) into origins
  for (size_t first = 0; first < origins.size();) {
    size_t last = first + 1;
    while (last < origins.size() && last - first < bs && !(split_rows && origins[last][0] != origins[first][0])) ++last;
    batches.emplace_back(first, last);
    first = last;
  }
  // Rolling buffer rows: a batch starts where the previous one's rows were handed out (its first
  // window's D start) and reaches its last window's start + patch depth.
  int64_t extent = 0;
  for (const auto& [first, last] : batches) {
    extent = std::max(extent, origins[last - 1][0] + o.patch[0] - origins[first][0]);
  }
  torch::Tensor sum;  // (K, extent, H', W'): weighted outputs of rows [base, base + extent)
  torch::Tensor norm = torch::zeros({extent, padded[1], padded[2]}, torch::TensorOptions().device(device));
  int64_t base = 0;
  for (const auto& [first, last] : batches) {
    std::vector<torch::Tensor> windows;
    for (size_t i = first; i < last; ++i) {
      const auto& p = origins[i];
      windows.push_back(x.slice(1, p[0], p[0] + o.patch[0]).slice(2, p[1], p[1] + o.patch[1]).slice(3, p[2], p[2] + o.patch[2]));
    }
    torch::Tensor batch = torch::stack(windows);  // (n, C, d, h, w)
    if (o.channels_last) batch = batch.contiguous(at::MemoryFormat::ChannelsLast3d);
    std::optional<AutocastGuard> autocast;  // the forward passes only; outputs cast to float32 below
    if (o.autocast) autocast.emplace(device.type(), *o.autocast);
    torch::Tensor out;                      // (n, K, d, h, w)
    if (o.mirror) {
      // All 8 mirrorings of the n windows in one forward pass: (8 n, C, d, h, w).
      const auto sets = mirror_combinations();
      std::vector<torch::Tensor> inputs;
      for (const auto& dims : sets) inputs.push_back(dims.empty() ? batch : torch::flip(batch, dims));
      const torch::Tensor all = net.forward(torch::cat(inputs)).to(torch::kFloat);
      const int64_t n = batch.size(0);
      for (size_t m = 0; m < sets.size(); ++m) {
        torch::Tensor part = all.narrow(0, static_cast<int64_t>(m) * n, n);
        if (!sets[m].empty()) part = torch::flip(part, sets[m]);
        out = out.defined() ? out + part : part;
      }
      out = out / static_cast<double>(sets.size());
    } else {
      out = net.forward(batch).to(torch::kFloat);
    }
    autocast.reset();
    if (!sum.defined()) sum = torch::zeros({out.size(1), extent, padded[1], padded[2]}, out.options());
    for (size_t i = first; i < last; ++i) {
      const auto& p = origins[i];
      const int64_t z = p[0] - base;
      sum.slice(1, z, z + o.patch[0]).slice(2, p[1], p[1] + o.patch[1]).slice(3, p[2], p[2] + o.patch[2])
          .add_(out[static_cast<int64_t>(i - first)] * weight);
      norm.slice(0, z, z + o.patch[0]).slice(1, p[1], p[1] + o.patch[1]).slice(2, p[2], p[2] + o.patch[2]).add_(weight);
    }
    // Rows before the next window's D start are final: normalise, hand out, shift the buffer.
    const int64_t next = last < origins.size() ? origins[last][0] : padded[0];
    const int64_t done = next - base;
    if (done <= 0) continue;
    const int64_t emit = std::min(next, shape[0]) - base;
    if (emit > 0) {
      const torch::Tensor rows = sum.narrow(1, 0, emit).narrow(2, 0, shape[1]).narrow(3, 0, shape[2]) /
                                 norm.narrow(0, 0, emit).narrow(1, 0, shape[1]).narrow(2, 0, shape[2]);
      sink.consume(base, rows);
    }
    const int64_t keep = extent - std::min(done, extent);
    for (int64_t r = 0; r < keep; ++r) {  // row by row: source and destination never overlap
      sum.select(1, r).copy_(sum.select(1, r + done));
      norm.select(0, r).copy_(norm.select(0, r + done));
    }
    sum.narrow(1, keep, extent - keep).zero_();
    norm.narrow(0, keep, extent - keep).zero_();
    base = next;
  }
  net.train(was_training);
}

namespace {
// Collects the slabs of a whole volume.
class ConcatSink : public SlabSink {
 public:
  void consume(int64_t, const torch::Tensor& slab) override { slabs.push_back(slab); }
  std::vector<torch::Tensor> slabs;
};
}  // namespace

torch::Tensor sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& o,
                                     const torch::Device& device) {
  ConcatSink sink;
  sliding_window_predict(net, image, o, device, sink);
  return torch::cat(sink.slabs, /*dim=*/1);
}

torch::Tensor finalize_prediction(const torch::Tensor& network_output, const Preprocessor& pre) {
  if (pre.task() == Task::kSegmentation) return network_output.argmax(0).to(torch::kUInt8);
  return pre.restore_target(network_output[0]).to(torch::kFloat);
}

namespace {

// Predictions file (docs/dataset-format.md, "Predictions"): root attrs format="u3d-predictions",
// task, source, checkpoint; /cases/<id>/prediction (D, H, W) with the case's spacing (and its
// loss mask, so an evaluation can apply it).
class PredictionWriter {
 public:
  PredictionWriter(const std::filesystem::path& path, const DatasetInfo& info, const std::string& source,
                   const std::string& checkpoint)
      : file_(path) {
    h5::Handle root(H5Gopen2(file_.get(), "/", H5P_DEFAULT), H5Gclose);
    h5::write_string_attribute(root.get(), "format", "u3d-predictions");
    h5::write_int_attribute(root.get(), "format_version", kDatasetFormatVersion);
    h5::write_string_attribute(root.get(), "task", to_string(info.task));
    h5::write_string_attribute(root.get(), "target_name", info.target_name);
    h5::write_string_attribute(root.get(), "target_units", info.target_units);
    h5::write_string_attribute(root.get(), "source", source);
    h5::write_string_attribute(root.get(), "checkpoint", checkpoint);
  }
  // Starts a case whose outputs are streamed (CaseOutputSink): its group, loss mask and spacing.
  CaseOutputOptions begin(const CachedCase& c) {
    StopSignals::throw_if_stopped(file_.path().string());  // predict-only installs the guard
    CaseOutputOptions o;
    o.context = fmt::format("{}: case '{}'", file_.path().string(), c.id);
    o.group = "cases/" + c.id;
    o.file = file_.get();
    h5::Handle group = h5::create_group(file_.get(), o.group, o.context);
    if (c.mask.defined()) h5::write_tensor(file_.get(), o.group + "/mask", c.mask[0], {64, 64, 64}, 4, o.context);
    h5::write_double_list_attribute(group.get(), "spacing", {c.spacing[0], c.spacing[1], c.spacing[2]});
    ids_.push_back(c.id);
    return o;
  }
  void commit(const std::string& split) {
    h5::write_string_dataset(file_.get(), "splits/" + split, ids_);
    file_.commit();
  }

 private:
  h5::StagedFile file_;
  std::vector<std::string> ids_;
};

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

}  // namespace

void run_prediction(const Config& cfg, const std::string& checkpoint) {
  const RunPaths paths(cfg);
  const CheckpointStore store(paths.checkpoints, cfg.checkpoint.keep_last);
  const auto ckpt_path = store.resolve(checkpoint);
  const CheckpointInfo info = read_checkpoint_info(ckpt_path);
  // The network and its preprocessing come from the checkpoint's config; data.path and predict.*
  // from the config given now.
  const Config trained = load_config_from_string(info.config_yaml, ckpt_path.string() + " (config)");
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
  const Runtime rt = init_runtime(cfg);
  std::error_code ec;
  if (!std::filesystem::exists(cfg.data.path, ec)) {
    throw ConfigError(fmt::format("data.path: dataset file {} not found", cfg.data.path));
  }
  const DatasetReader reader(cfg.data.path);
  const Preprocessor pre(trained.data, reader.info());
  if (pre.in_channels() != info.in_channels || pre.out_channels() != info.out_channels) {
    throw ConfigError(fmt::format("{}: the checkpoint expects {} input and {} output channels; {} gives {} and {}",
                                  ckpt_path.string(), info.in_channels, info.out_channels, cfg.data.path,
                                  pre.in_channels(), pre.out_channels()));
  }
  Network net = build_network(trained.model, info.in_channels, info.out_channels);
  net->to(rt.device);
  load_checkpoint(ckpt_path, *net, nullptr, rt.device, /*restore_rng=*/false);
  const bool channels_last = resolve_channels_last(trained.model, rt.device);
  set_layout(*net, channels_last);
  spdlog::info("predict: checkpoint {} (epoch {}, step {})", ckpt_path.string(), info.state.epoch, info.state.global_step);

  // Preflight: a case with an error is skipped with a per-case report; the others are predicted.
  const auto& split_ids = reader.split(cfg.predict.split);
  const DataReport report = check_dataset(cfg.data.path, split_ids, rt.threads);
  log_report(report, "predict preflight");
  if (report.file_unusable()) throw DataError(report.describe(report.problems.front()));
  const auto bad = report.bad_cases();
  std::vector<std::string> ids;
  for (const auto& id : split_ids) {
    if (!bad.count(id)) ids.push_back(id);
  }
  ensure_writable_directory(paths.predictions);
  // One set of outputs per split: nothing of an earlier prediction (another checkpoint, other
  // skipped cases) stays beside the new files.
  remove_previous_outputs(paths.predictions, cfg.predict.split, openkbp::is_openkbp_dataset(reader.info()));
  std::vector<std::string> outputs;  // file names of this set, for <split>_outputs.txt
  if (!bad.empty()) {
    std::string skipped = "case,field,problem\n";
    for (const auto& p : report.problems) {
      if (!p.is_error() || p.case_id.empty()) continue;
      std::string message = p.message;
      std::replace(message.begin(), message.end(), ',', ';');
      skipped += fmt::format("{},{},{}\n", p.case_id, p.field, message);
    }
    const auto skipped_path = paths.predictions / (cfg.predict.split + "_skipped.csv");
    write_file_atomic(skipped_path, skipped);
    outputs.push_back(skipped_path.filename().string());
    spdlog::warn("predict: skipping {} of {} case(s) with errors: {} (listed in {}); predicting the others", bad.size(),
                 split_ids.size(), fmt::join(bad, ", "), skipped_path.string());
  }
  if (ids.empty()) {
    throw DataError(fmt::format("{}: every case of split '{}' has errors (listed above); nothing to predict",
                                cfg.data.path, cfg.predict.split));
  }
  SlidingWindowOptions sw{trained.data.patch_size, cfg.predict.overlap,
                          cfg.predict.batch_size > 0 ? cfg.predict.batch_size : cfg.data.batch_size, cfg.predict.gaussian,
                          /*mirror=*/cfg.predict.tta == Tta::kFlips,
                          /*autocast=*/inference_autocast(cfg.training, rt.device), channels_last};
  spdlog::info("predict: forward passes in {}, {}", sw.autocast ? c10::toString(*sw.autocast) : "float32",
               channels_last ? "channels-last" : "contiguous");

  const auto out_path = paths.predictions / (cfg.predict.split + ".h5");
  PredictionWriter writer(out_path, reader.info(), cfg.data.path, ckpt_path.string());
  // OpenKBP data: also the challenge's submission files, <run>/predictions/openkbp/<id>.csv.
  std::unique_ptr<openkbp::SubmissionWriter> submission;
  if (openkbp::is_openkbp_dataset(reader.info())) {
    submission = std::make_unique<openkbp::SubmissionWriter>(paths.predictions / "openkbp");
  }
  const bool seg = pre.task() == Task::kSegmentation;
  const std::string metric = seg ? "dice" : "mae";
  std::string csv = fmt::format("case,{},baseline_{}\n", metric, metric);
  std::vector<double> values, baselines;
  int64_t nifti_files = 0;
  for (const auto& id : ids) {
    // One case in memory at a time; its outputs are streamed slab by slab (prediction_output.h).
    const TensorCache one = TensorCache::load(reader, {id}, pre, /*threads=*/1);
    const CachedCase& c = one[0];
    CaseOutputOptions oo = writer.begin(c);
    oo.probabilities = cfg.predict.probabilities && seg;
    oo.keep_prediction = submission != nullptr;
    if (cfg.predict.nifti) {
      auto source = reader.read_source(id);
      if (source && source->format == "nifti") {
        oo.nifti_path = paths.predictions / cfg.predict.split / (id + source->file_ending);
        oo.geometry = std::move(source);
        ++nifti_files;
      }
    }
    CaseOutputSink sink(c, pre, std::move(oo), info.state.train_target_mean);
    sliding_window_predict(*net, c.image, sw, rt.device, sink);
    const CaseScore score = sink.finish();
    if (submission) submission->write(c.id, score.prediction, c.mask);
    if (!c.target.defined()) continue;
    const double v = score.value, b = score.baseline;
    values.push_back(v);
    baselines.push_back(b);
    csv += fmt::format("{},{:.6g},{:.6g}\n", c.id, v, b);
    spdlog::info("predict: {} {} {:.4f} (baseline {:.4f})", c.id, metric, v, b);
  }
  writer.commit(cfg.predict.split);
  outputs.push_back(out_path.filename().string());
  spdlog::info("predict: wrote {} ({} cases)", out_path.string(), ids.size());
  if (nifti_files > 0) outputs.push_back(cfg.predict.split + "/");
  if (nifti_files > 0) {
    spdlog::info("predict: wrote {} NIfTI files with the inputs' geometry into {}", nifti_files,
                 (paths.predictions / cfg.predict.split).string());
  }
  if (submission && submission->files() > 0) {
    submission->commit();
    outputs.push_back("openkbp/");
    spdlog::info("predict: wrote {} OpenKBP submission files (prediction x possible-dose mask) to {}",
                 submission->files(), (paths.predictions / "openkbp").string());
  }
  if (!values.empty()) {
    csv += fmt::format("mean,{:.6g},{:.6g}\n", nan_mean(values), nan_mean(baselines));
    const auto csv_path = paths.predictions / (cfg.predict.split + "_metrics.csv");
    write_file_atomic(csv_path, csv);
    outputs.push_back(csv_path.filename().string());
    const std::string units = seg ? "" : (" " + reader.info().target_units);
    spdlog::info("predict: {} split mean {} {:.4f}{} | baseline ({}) {:.4f}{}", cfg.predict.split, metric,
                 nan_mean(values), units, seg ? "all background" : "predict the training mean",
                 nan_mean(baselines), units);
  }
  const auto manifest = paths.predictions / (cfg.predict.split + "_outputs.txt");
  write_file_atomic(manifest, fmt::format("checkpoint: {}\nepoch: {}\nglobal_step: {}\nfiles: {}\n", ckpt_path.string(),
                                          info.state.epoch, info.state.global_step, fmt::join(outputs, " ")));
  spdlog::info("predict: outputs of checkpoint {} (epoch {}): {} (listed in {})", ckpt_path.string(),
               info.state.epoch, fmt::join(outputs, ", "), manifest.string());
}

}  // namespace u3d
