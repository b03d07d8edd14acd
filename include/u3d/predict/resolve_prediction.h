// Every setting of a prediction that depends on its checkpoints, the dataset or the device,
// checked and derived in one place before any network loads: prediction's counterpart of training's
// resolve() (train/resolve.h), which `trainer --predict-only`, `--ensemble` and `--fold all` call.
//
//   const auto member = read_prediction_member(paths.checkpoints, cfg.checkpoint.keep_last, "best");
//   const auto reader = open_dataset(cfg);                                   // io/h5/open_dataset.h
//   const ResolvedPrediction rp = resolve_prediction(cfg, {member}, *reader, runtime.device);
//   predict_split(rp, *reader, out_dir, runtime);                           // predict/prediction_run.h
//
// The network and its preprocessing come from the (first) checkpoint's config; data.path,
// predict.* and the device from the config given now.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"
#include "u3d/predict/postprocess.h"
#include "u3d/predict/predictor.h"

namespace u3d {

// One trained model of a prediction: its checkpoint and the config it was trained with.
struct PredictionMember {
  std::filesystem::path checkpoint;
  CheckpointInfo info;
  Config trained;
};

// The checkpoint `checkpoint` (best, last, newest or a file name, CheckpointStore::resolve) of the
// run whose checkpoints are in `checkpoints`; CheckpointError naming it.
PredictionMember read_prediction_member(const std::filesystem::path& checkpoints, int64_t keep_last,
                                        const std::string& checkpoint);
// The members of `--ensemble A,B` (or `--fold all`'s fold_0, fold_1, ...): each a run folder, given
// as a path or as a name under experiment.output_dir/experiment.name; ConfigError naming one that
// holds no checkpoints/.
std::vector<PredictionMember> read_ensemble_members(const Config& cfg, const std::vector<std::string>& names,
                                                    const std::string& checkpoint);

struct ResolvedPrediction {
  Config cfg;                             // the config given now: data.path, predict.*
  Config trained;                         // the first member's: network, patch and preprocessing
  std::vector<PredictionMember> members;  // one: a single model; more: their EnsembleNetwork
  // The map from raw values to network inputs (data/preprocess.h: make_preprocessor of the trained
  // data section), the same one training used.
  std::shared_ptr<const Preprocessor> pre;
  PostprocessOptions post;       // predict.threshold and predict.min_component_size, checked
  bool channels_last = false;    // the network's layout on the device (model/layout.h)
  SlidingWindowOptions window;   // window_options() with the trained patch and predict.tta
  std::vector<std::string> ids;  // predict.split's cases (or the fold's held-out cases), before preflight
  double train_mean = 0.0;       // the regression baseline: the members' mean training target
  std::string checkpoint_list;   // the members' checkpoint paths, comma-separated

  Task task() const { return pre->task(); }
};

// Every check of a prediction (ConfigError naming the key or the checkpoint): the members share one
// preprocessing and window (same channels, data.normalize, data.target_scale, data.patch_size), the
// checkpoint's channels match what the dataset gives, the post-processing fits the task, and the
// split exists; warns where the config given now differs from the checkpoint's model or
// preprocessing (the checkpoint's value is used), and logs the post-processing chosen.
ResolvedPrediction resolve_prediction(const Config& cfg, std::vector<PredictionMember> members,
                                      const DatasetReader& reader, const torch::Device& device);

}  // namespace u3d
