// One prediction run: the resolved members (resolve_prediction.h) loaded as one network, the cases
// of the split checked (preflight: a case with an error is skipped and listed), then each case read,
// normalised by the one Preprocessor, predicted by the sliding window (predictor.h) and streamed
// into the run's outputs (prediction_output.h): <split>.h5, NIfTI files for NIfTI-imported cases,
// OpenKBP submission files for OpenKBP data, <split>_metrics.csv, <split>_skipped.csv, and the
// manifest <split>_outputs.txt. `trainer --predict-only` (one model) and `--ensemble`/`--fold all`
// (an EnsembleNetwork, ensemble.h) both run through predict_split().
#pragma once
#include <torch/torch.h>

#include <filesystem>

#include "u3d/core/run.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/unet.h"
#include "u3d/predict/resolve_prediction.h"

namespace u3d {

// The members built and loaded onto `device` in rp.channels_last's layout: the single network, or
// the EnsembleNetwork of several (logged as the checkpoints load).
Network load_prediction_network(const ResolvedPrediction& rp, const torch::Device& device);

// Predicts rp.ids of `reader` into `out_dir` (made if needed). Every file of an earlier prediction of
// the split is removed first, so the folder holds one set, from one checkpoint. DataError when the
// file is unusable or every case has errors; StopRequested when a stop signal arrives between cases
// (the staged outputs are removed).
void predict_split(const ResolvedPrediction& rp, const DatasetReader& reader, const std::filesystem::path& out_dir,
                   const Runtime& rt);

}  // namespace u3d
