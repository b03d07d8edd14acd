#include "u3d/train/resolve.h"

#include <algorithm>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"
#include "u3d/data/folds.h"
#include "u3d/data/sampler.h"
#include "u3d/model/autocast.h"
#include "u3d/model/layout.h"
#include "u3d/train/losses.h"
#include "u3d/train/resume.h"

namespace u3d {
namespace {

Monitor resolve_monitor(const Config& cfg, bool scores_dose) {
  if (cfg.checkpoint.monitor != Monitor::kAuto) return cfg.checkpoint.monitor;
  if (scores_dose && cfg.training.val_full) return Monitor::kValDoseScore;
  return cfg.training.val_full ? Monitor::kValMetric : Monitor::kPseudoDiceEma;
}

// cldice and skeleton_recall erode each patch training.skeleton_iterations times, keeping every
// step for the backward pass: beyond half the largest patch edge an iteration changes nothing and
// only costs memory (10,000 of them grew the graph to 20 GB).
void check_skeleton_iterations(const Config& cfg) {
  const LossSpec& spec = cfg.training.loss;
  if (!spec.is_list()) return;
  const Loss loss(spec);
  const std::vector<std::string>& terms = loss.term_names();
  const bool skeleton = std::any_of(terms.begin(), terms.end(),
                                    [](const std::string& t) { return t == "cldice" || t == "skeleton_recall"; });
  const auto& patch = cfg.data.patch_size;
  const int64_t most = (*std::max_element(patch.begin(), patch.end()) + 1) / 2;
  if (!skeleton || cfg.training.skeleton_iterations <= most) return;
  throw ConfigError(fmt::format(
      "{}: training.skeleton_iterations {} is more than half the largest edge of data.patch_size {} ({}): "
      "iterations beyond it change nothing and each keeps patch-sized tensors for the backward pass; use at most {}",
      key_origin(cfg, "training.skeleton_iterations"), cfg.training.skeleton_iterations,
      shape_text(std::vector<int64_t>(patch.begin(), patch.end())), most, most));
}

}  // namespace

bool ResolvedConfig::full_validation_due(int64_t epoch) const {
  return validates() && cfg.training.val_full && (epoch % cfg.training.val_every == 0 || epoch == cfg.training.epochs);
}

bool ResolvedConfig::monitor_measured(int64_t epoch) const {
  switch (monitor) {
    case Monitor::kPseudoDice:
    case Monitor::kPseudoDiceEma: return validates_patches();
    case Monitor::kValLoss: return validates_patches() || full_validation_due(epoch);  // patches' loss, or the volumes'
    default: return full_validation_due(epoch);
  }
}

ResolvedConfig resolve(const Config& cfg, const DatasetReader& reader, const torch::Device& device, int64_t rank,
                       int64_t world_size) {
  ResolvedConfig rc;
  rc.cfg = cfg;
  rc.rank = rank;
  rc.world_size = world_size;
  rc.info = reader.info();
  const Task task = rc.info.task;
  rc.pre = make_preprocessor(rc.cfg.data, rc.info);  // data.normalize's `dataset` entries resolved
  const DataConfig& data = rc.cfg.data;
  const TrainingConfig& training = rc.cfg.training;
  check_batch_memory(data.batch_size, data.patch_size, rc.pre->in_channels());
  rc.metric = task_metric(task);
  if (task == Task::kDose) rc.dvh_structures = resolve_dvh_structures(data.dvh_structures, rc.info.channel_names);
  if (const auto fold = fold_number(rc.cfg)) {  // cross-validation: the fold's cases (data/folds.h)
    auto folds = load_folds(reader, rc.cfg);
    rc.train_ids = std::move(folds[static_cast<size_t>(*fold)].train);
    rc.val_ids = std::move(folds[static_cast<size_t>(*fold)].val);
  } else if (data.folds > 0) {
    throw ConfigError(
        fmt::format("experiment.fold: {}: one fold at a time here (`trainer --fold all` runs them in "
                    "turn)",
                    rc.cfg.experiment.fold));
  } else {
    rc.train_ids = split_ids(reader, "data.train_split", data.train_split);
    if (!data.val_split.empty()) rc.val_ids = split_ids(reader, "data.val_split", data.val_split);
  }
  if (training.early_stop_patience > 0 && !rc.validates()) {
    throw ConfigError(
        fmt::format("{}: training.early_stop_patience needs a validation split (data.val_split is "
                    "empty): it counts epochs without an improvement of the validation metric",
                    key_origin(rc.cfg, "training.early_stop_patience")));
  }
  const Monitor asked = rc.cfg.checkpoint.monitor;
  if (rc.validates() && rc.dvh_structures.empty() &&
      (asked == Monitor::kValDoseScore || asked == Monitor::kValDvhScore)) {
    throw ConfigError(
        fmt::format("{}: checkpoint.monitor: {} needs the OpenKBP dose metrics, which are scored only for "
                    "a dose dataset whose channels include structures named by data.dvh_structures",
                    key_origin(rc.cfg, "checkpoint.monitor"), to_string(asked)));
  }
  if (rc.validates_patches() && task != Task::kSegmentation) {
    throw ConfigError("training.val_patch_batches: the pseudo-Dice needs a segmentation dataset; set it to 0");
  }
  if (rc.cfg.model.deep_supervision && task != Task::kSegmentation) {
    throw ConfigError("model.deep_supervision: needs a segmentation dataset (labels to down-sample)");
  }
  // The loss fits the task and the head (masks: once loaded). A sigmoid head's auto becomes its
  // list [bce, dice] here, so the run's config, banner and metrics.csv columns name the terms.
  const LossSpec loss = resolve_loss(training.loss, task, /*has_mask=*/true, rc.cfg.model.head);
  if (loss.is_list() && !training.loss.is_list()) rc.cfg.training.loss = loss;
  check_skeleton_iterations(rc.cfg);
  loss_options(training, rc.info);  // class weights fit the classes
  if (task == Task::kSegmentation && rc.info.ignore_label >= 0 &&
      (data.foreground == "auto" || data.foreground == "target")) {
    // Oversample the classes, not the unlabeled voxels (the ignore label is above them).
    std::vector<std::string> classes;
    for (int64_t k = 1; k < rc.info.num_classes; ++k) classes.push_back(std::to_string(k));
    rc.cfg.data.foreground = fmt::format("labels:{}", fmt::join(classes, ","));
  }
  resolve_precision(training, network_norm(rc.cfg.model), device);  // fp16 needs CUDA
  rc.cases_sha256 = case_ids_sha256(rc.train_ids);
  // An epoch sees every case once, or with model.dims 2 every slice of them once (on average).
  int64_t samples = static_cast<int64_t>(rc.train_ids.size());
  if (rc.cfg.model.dims == 2 && training.steps_per_epoch == 0) {
    samples = 0;
    for (const auto& id : rc.train_ids) samples += reader.case_shape(id)[static_cast<size_t>(data.slice_axis)];
  }
  const int64_t per_step = data.batch_size * training.accumulate_steps * world_size;  // samples per optimizer step
  rc.steps_per_epoch = training.steps_per_epoch > 0 ? training.steps_per_epoch : (samples + per_step - 1) / per_step;
  rc.monitor = resolve_monitor(rc.cfg, rc.scores_dose());
  switch (rc.monitor) {
    case Monitor::kValLoss: rc.monitor_name = "val_loss"; break;
    case Monitor::kValDoseScore: rc.monitor_name = "val_dose_score"; break;
    case Monitor::kValDvhScore: rc.monitor_name = "val_dvh_score"; break;
    case Monitor::kPseudoDice: rc.monitor_name = "val_pseudo_dice", rc.monitor_higher_is_better = true; break;
    case Monitor::kPseudoDiceEma: rc.monitor_name = "val_pseudo_dice_ema", rc.monitor_higher_is_better = true; break;
    case Monitor::kValMetric:
    case Monitor::kAuto:
      rc.monitor_name = rc.metric.name, rc.monitor_higher_is_better = rc.metric.higher_is_better;
      break;
  }
  if (rc.validates() && !rc.monitor_measured(training.epochs)) {  // never best.pt, never an early stop
    throw ConfigError(
        fmt::format("{}: checkpoint.monitor: {} is measured on the whole val volumes, which training.val_full: "
                    "false turns off; monitor auto, val_loss or pseudo_dice_ema, or set training.val_full: true",
                    key_origin(rc.cfg, "checkpoint.monitor"), to_string(rc.cfg.checkpoint.monitor)));
  }
  return rc;
}

}  // namespace u3d
