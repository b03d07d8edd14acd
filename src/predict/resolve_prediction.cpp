#include "u3d/predict/resolve_prediction.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"
#include "u3d/data/folds.h"
#include "u3d/io/h5/open_dataset.h"
#include "u3d/model/layout.h"

namespace u3d {
namespace {

// The cases of predict.split; with cross-validation (experiment.fold K), predict.split "val" (or
// data.val_split) means fold K's held-out cases (data/folds.h).
std::vector<std::string> cases_to_predict(const Config& cfg, const DatasetReader& reader) {
  const auto fold = fold_number(cfg);
  if (fold && (cfg.predict.split == "val" || cfg.predict.split == cfg.data.val_split)) {
    return load_folds(reader, cfg)[static_cast<size_t>(*fold)].val;
  }
  return split_ids(reader, "predict.split", cfg.predict.split);
}

// Warns where the config given now differs from the checkpoint's network or preprocessing.
void warn_differences(const Config& cfg, const Config& trained) {
  const bool from_dataset =
      std::find(cfg.data.normalize.begin(), cfg.data.normalize.end(), "dataset") != cfg.data.normalize.end();
  for (const auto& d : diff(trained, cfg)) {
    if (from_dataset && d.rfind("data.normalize", 0) == 0) continue;  // resolved into the checkpoint at training
    if (d.rfind("model.", 0) == 0 || d.rfind("data.normalize", 0) == 0 || d.rfind("data.channels", 0) == 0 ||
        d.rfind("data.target_scale", 0) == 0) {
      spdlog::warn("predict: {} differs from the checkpoint; using the checkpoint's value", d);
    }
  }
}

// The member's task and input channels against the dataset's, checked before anything the config
// says: a run used on other data is named first, with what it was trained for (its config's keys,
// data.normalize included, are the checkpoint's and not the user's to fix). ConfigError.
void check_member_fits(const PredictionMember& m, const DatasetInfo& data, const std::string& data_path) {
  const DataConfig& t = m.trained.data;
  bool fits = m.info.task == to_string(data.task);
  if (t.channels.empty()) {
    fits = fits && m.info.in_channels == static_cast<int64_t>(data.channel_names.size());
  } else {
    for (const auto& name : t.channels) {
      fits = fits && find_channel(data.channel_names, name).has_value();
    }
  }
  if (data.task == Task::kSegmentation) fits = fits && m.info.out_channels == data.num_classes;
  if (fits) return;
  const auto classes = [](const std::string& task, int64_t n) {
    return task == "segmentation" ? fmt::format(", {} classes", n) : std::string();
  };
  const std::string trained_channels =
      t.channels.empty() ? fmt::format("all of {}'s", t.path) : fmt::format("[{}]", fmt::join(t.channels, ", "));
  throw ConfigError(fmt::format(
      "predict: run {} (checkpoint {}) was trained for {} on {} input channel(s), {}{}; {} is a {} dataset with "
      "{} channel(s) [{}]{}: predict with the run trained for this data (experiment.name, --ensemble), or give "
      "this run data like its own (data.path)",
      m.checkpoint.parent_path().parent_path().string(), m.checkpoint.filename().string(), m.info.task,
      m.info.in_channels, trained_channels, classes(m.info.task, m.info.out_channels), data_path, to_string(data.task),
      data.channel_names.size(), fmt::join(data.channel_names, ", "), classes(to_string(data.task), data.num_classes)));
}

// One preprocessing and one window for every member of an ensemble.
void check_members(const std::vector<PredictionMember>& members) {
  const PredictionMember& first = members.front();
  for (const auto& m : members) {
    const auto& a = first.trained.data;
    const auto& b = m.trained.data;
    if (m.info.in_channels != first.info.in_channels || m.info.out_channels != first.info.out_channels ||
        a.patch_size != b.patch_size || a.channels != b.channels || a.normalize != b.normalize ||
        a.target_scale != b.target_scale || m.trained.model.head != first.trained.model.head) {
      throw ConfigError(fmt::format(
          "ensemble: {} was trained with other inputs or head than {} (channels, data.normalize, "
          "data.target_scale, data.patch_size or model.head differ); an ensemble averages models of one kind",
          m.checkpoint.string(), first.checkpoint.string()));
    }
  }
}

}  // namespace

PredictionMember read_prediction_member(const std::filesystem::path& checkpoints, int64_t keep_last,
                                        const std::string& checkpoint) {
  const CheckpointStore store(checkpoints, keep_last);
  PredictionMember m;
  m.checkpoint = store.resolve(checkpoint);
  m.info = read_checkpoint_info(m.checkpoint);
  m.trained = load_config_from_string(m.info.config_yaml, m.checkpoint.string() + " (config)");
  return m;
}

std::vector<PredictionMember> read_ensemble_members(const Config& cfg, const std::vector<std::string>& names,
                                                    const std::string& checkpoint) {
  const auto experiment = std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name;
  std::vector<PredictionMember> members;
  for (const auto& name : names) {
    auto dir = std::filesystem::path(name);
    if (dir.is_relative() && !std::filesystem::exists(dir / "checkpoints")) dir = experiment / name;
    if (!std::filesystem::is_directory(dir / "checkpoints")) {
      throw ConfigError(fmt::format("--ensemble: {}: not a run folder (no checkpoints/ in {})", name, dir.string()));
    }
    members.push_back(read_prediction_member(dir / "checkpoints", cfg.checkpoint.keep_last, checkpoint));
  }
  return members;
}

ResolvedPrediction resolve_prediction(const Config& cfg, std::vector<PredictionMember> members,
                                      const DatasetReader& reader, const torch::Device& device) {
  if (members.empty()) throw ConfigError("predict: no checkpoint to predict with");
  ResolvedPrediction rp;
  rp.cfg = cfg;
  rp.trained = members.front().trained;
  const CheckpointInfo& info = members.front().info;
  const std::string& ckpt_path = members.front().checkpoint.string();
  for (const auto& m : members) check_member_fits(m, reader.info(), cfg.data.path);
  warn_differences(cfg, rp.trained);
  check_members(members);
  rp.pre = make_preprocessor(rp.trained.data, reader.info());
  const Preprocessor& pre = *rp.pre;
  if (pre.in_channels() != info.in_channels || pre.out_channels() != info.out_channels) {
    throw ConfigError(fmt::format("{}: the checkpoint expects {} input and {} output channels; {} gives {} and {}",
                                  ckpt_path, info.in_channels, info.out_channels, cfg.data.path, pre.in_channels(),
                                  pre.out_channels()));
  }
  const Head head = rp.trained.model.head;  // the checkpoint's network decides how its output is read
  rp.post = PostprocessOptions{cfg.predict.threshold, cfg.predict.min_component_size, head};
  check_postprocess(rp.post, pre.task(), pre.out_channels());  // ConfigError naming the key
  if (head == Head::kSigmoid) {
    spdlog::info(
        "predict: sigmoid head: label k where p(channel k - 1) >= {} (the most probable such channel), "
        "components below {} voxel(s) removed",
        effective_threshold(rp.post), rp.post.min_component_size);
  } else if (rp.post.threshold > 0 || rp.post.min_component_size > 0) {
    spdlog::info("predict: labels post-processed: {}, components below {} voxel(s) removed",
                 rp.post.threshold > 0 ? fmt::format("p(class 1) >= {}", rp.post.threshold) : std::string("argmax"),
                 rp.post.min_component_size);
  }
  rp.channels_last = resolve_channels_last(rp.trained.model, device);
  rp.window = window_options(cfg, rp.trained.data.patch_size, device, rp.channels_last,
                             /*mirror=*/cfg.predict.tta == Tta::kFlips);
  rp.window.sigmoid = head == Head::kSigmoid;
  rp.ids = cases_to_predict(cfg, reader);
  std::vector<std::string> checkpoints;
  for (const auto& m : members) {
    checkpoints.push_back(m.checkpoint.string());
    rp.train_mean += m.info.state.train_target_mean / static_cast<double>(members.size());
  }
  rp.checkpoint_list = fmt::format("{}", fmt::join(checkpoints, ","));
  rp.members = std::move(members);
  return rp;
}

}  // namespace u3d
