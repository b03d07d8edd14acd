#include "u3d/predict/cascade_data.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/parallel.h"
#include "u3d/data/folds.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/predictions_file.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// The split of `id` in `info`, for the hint of which split to predict ("test" when in none).
std::string split_of(const DatasetInfo& info, const std::string& id) {
  for (const auto& [name, ids] : info.splits) {
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) return name;
  }
  return "test";
}

// The *.h5 files of `dir`, sorted; none when it does not exist.
std::vector<fs::path> prediction_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".h5") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

torch::Tensor previous_stage_channels(const torch::Tensor& scores, const Shape3& shape) {
  namespace F = torch::nn::functional;
  torch::Tensor s = scores.to(torch::kFloat);
  if (s.size(1) != shape[0] || s.size(2) != shape[1] || s.size(3) != shape[2]) {
    s = F::interpolate(s.unsqueeze(0), F::InterpolateFuncOptions()
                                           .size(std::vector<int64_t>{shape[0], shape[1], shape[2]})
                                           .mode(torch::kTrilinear)
                                           .align_corners(false))[0];
  }
  const torch::Tensor labels = s.argmax(0);  // (D, H, W)
  const int64_t k = scores.size(0);
  torch::Tensor out = torch::empty({std::max<int64_t>(0, k - 1), shape[0], shape[1], shape[2]}, torch::kUInt8);
  for (int64_t c = 1; c < k; ++c) out[c - 1].copy_(labels == c);
  return out;
}

CascadeDataSummary make_cascade_dataset(const CascadeDataOptions& o) {
  const DatasetReader reader(o.data);
  const DatasetInfo& info = reader.info();
  if (info.task != Task::kSegmentation) {
    throw ConfigError(fmt::format("cascade: {} is a {} dataset; the cascade is nnU-Net's segmentation configuration",
                                  o.data.string(), to_string(info.task)));
  }
  const fs::path folds_path = o.previous / "folds.json";
  std::error_code ec;
  if (!fs::is_regular_file(folds_path, ec)) {
    throw ConfigError(fmt::format(
        "cascade: {} has no folds.json: train the first stage with cross-validation (trainer --config <lowres "
        "yaml> --set data.folds=5 --fold all); the second stage trains on its out-of-fold predictions, as nnU-Net's",
        o.previous.string()));
  }
  const std::vector<FoldSplit> folds = folds_from_json(read_file(folds_path), folds_path.string());
  std::vector<std::unique_ptr<PredictionsReader>> files;
  std::map<std::string, const PredictionsReader*> from;
  CascadeDataSummary summary;
  for (size_t k = 0; k < folds.size(); ++k) {
    const fs::path val = o.previous / fmt::format("fold_{}", k) / "predictions" / "val.h5";
    if (!fs::is_regular_file(val, ec)) {
      throw ConfigError(fmt::format(
          "cascade: {} is missing: fold {} of the first stage has not predicted its held-out cases (it does when its "
          "training ends; `--fold {} --resume` finishes it)",
          val.string(), k, k));
    }
    files.push_back(std::make_unique<PredictionsReader>(val));
    for (const auto& id : folds[k].val) {
      if (!files.back()->has(id))
        throw DataError(fmt::format("{}: no prediction of its held-out case '{}'", val.string(), id));
      from[id] = files.back().get();
    }
  }
  const std::map<std::string, const PredictionsReader*> held_out = from;  // folds.json's cases, out of fold
  for (const fs::path& dir : {o.previous / "ensemble" / "predictions", o.previous / "predictions"}) {
    for (const auto& file : prediction_files(dir)) {
      files.push_back(std::make_unique<PredictionsReader>(file));
      for (const auto& id : files.back()->ids()) from.emplace(id, files.back().get());  // the first found stays
    }
  }
  for (const auto& id : info.case_ids) {
    if (!from.count(id)) {
      throw ConfigError(fmt::format(
          "cascade: case '{}' of {} has no first-stage prediction under {}; predict its split with the first stage, "
          "e.g. trainer --config <lowres yaml> --fold all --predict-only --set predict.split={}",
          id, o.data.string(), o.previous.string(), split_of(info, id)));
    }
  }
  DatasetInfo out_info = info;
  out_info.splits.clear();
  out_info.case_ids.clear();
  for (int64_t c = 1; c < info.num_classes; ++c) {
    summary.added_channels.push_back("previous_" + info.class_names[static_cast<size_t>(c)]);
    out_info.channel_names.push_back(summary.added_channels.back());
    if (!out_info.channel_normalization.empty()) out_info.channel_normalization.push_back("none");
  }
  DatasetWriter writer(o.out, out_info);
  const int64_t n = static_cast<int64_t>(info.case_ids.size());
  const int64_t threads = resolve_threads(o.threads);
  ordered_pipeline(
      n, threads, /*window=*/threads,
      [&](int64_t i) {
        const std::string& id = info.case_ids[static_cast<size_t>(i)];
        const PredictionsReader& p = *from.at(id);
        CaseData c = reader.read_case(id);
        c.source = reader.read_source(id);
        torch::Tensor scores;
        if (p.has_probabilities(id)) {
          scores = p.probabilities(id);
        } else {
          const torch::Tensor labels = p.prediction(id, torch::kLong);
          if (labels.numel() > 0 &&
              (labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= info.num_classes)) {
            throw DataError(fmt::format("{}: labels outside [0, {}): the first stage predicts other classes than {}",
                                        p.describe(id), info.num_classes, o.data.string()));
          }
          scores = torch::one_hot(labels, info.num_classes).permute({3, 0, 1, 2}).to(torch::kFloat);
        }
        if (scores.dim() != 4 || scores.size(0) != info.num_classes) {
          throw DataError(fmt::format("{}: {} classes; {} has {}", p.describe(id), scores.size(0), o.data.string(),
                                      info.num_classes));
        }
        const Shape3 shape = {c.image.size(1), c.image.size(2), c.image.size(3)};
        c.image = torch::cat({c.image.to(torch::kFloat), previous_stage_channels(scores, shape).to(torch::kFloat)}, 0);
        return c;
      },
      [&](int64_t, CaseData c) { writer.write_case(c); });
  for (const auto& [name, ids] : info.splits) writer.set_split(name, ids);
  writer.commit();
  summary.cases = n;
  for (const auto& id : info.case_ids) (held_out.count(id) ? summary.out_of_fold : summary.other) += 1;
  return summary;
}

}  // namespace u3d
