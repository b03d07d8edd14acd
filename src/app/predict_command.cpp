// `trainer --predict-only`: the command around prediction's library verb (predict/): the members
// read from the run's checkpoints (or the ensemble's run folders), the prediction resolved
// (resolve_prediction.h) and the split predicted into the predictions folder (prediction_run.h).
#include <filesystem>

#include "u3d/app/commands.h"
#include "u3d/core/run.h"
#include "u3d/io/h5/open_dataset.h"
#include "u3d/predict/prediction_run.h"
#include "u3d/predict/resolve_prediction.h"

namespace u3d {
namespace {

// Predicts cfg.predict.split with the members (one: a single model; more: their EnsembleNetwork)
// into `out_dir`.
void predict_with(const Config& cfg, std::vector<PredictionMember> members, const std::filesystem::path& out_dir) {
  const Runtime rt = init_runtime(cfg);
  const auto dataset = open_dataset(cfg);  // ConfigError naming data.path
  const ResolvedPrediction rp = resolve_prediction(cfg, std::move(members), *dataset, rt.device);
  predict_split(rp, *dataset, out_dir, rt);
}

}  // namespace

void run_prediction(const Config& cfg, const std::string& checkpoint) {
  const RunPaths paths(cfg);
  predict_with(cfg, {read_prediction_member(paths.checkpoints, cfg.checkpoint.keep_last, checkpoint)},
               paths.predictions);
}

std::filesystem::path run_ensemble_prediction(const Config& cfg, const std::vector<std::string>& members,
                                              const std::string& checkpoint) {
  const auto out_dir =
      std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name / "ensemble" / "predictions";
  predict_with(cfg, read_ensemble_members(cfg, members, checkpoint), out_dir);
  return out_dir;
}

}  // namespace u3d
