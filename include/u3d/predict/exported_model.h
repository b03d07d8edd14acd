// `trainer predict -i ... --model DIR`: a folder written by `trainer export` (model/model_export.h) as
// a prediction member. DIR/model.safetensors holds every parameter and buffer under its LibTorch name
// and, as its header's metadata, the resolved config, task and channel counts; the network is built
// from them, loaded by name and written as a checkpoint into a scratch folder, which the prediction
// then reads as it reads a run's (read_prediction_member).
#pragma once
#include <filesystem>

#include "u3d/predict/resolve_prediction.h"

namespace u3d {

// DataError naming the file when it is not an export (no metadata, format other than "u3d-model"),
// or a tensor is missing, extra, or of another shape or dtype than the network's; IoError when it
// cannot be read. `checkpoints`: an empty scratch folder (best.pt is written there).
PredictionMember member_from_export(const std::filesystem::path& dir, const std::filesystem::path& checkpoints);

}  // namespace u3d
