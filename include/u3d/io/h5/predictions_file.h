// Reads a predictions file of `trainer --predict-only` (<run>/predictions/<split>.h5, written by
// predict/prediction_output.h's PredictionWriter; layout in docs/dataset-format.md):
//   / attrs format = "u3d-predictions", task, ...
//   /cases/<id>/prediction      (D, H, W) uint8 labels (segmentation) or float32 (regression)
//   /cases/<id>/probabilities   (K, D, H, W) float32 softmax, with predict.probabilities: true
//
//   PredictionsReader p("runs/liver_lowres/fold_0/predictions/val.h5");
//   for (const auto& id : p.ids()) torch::Tensor labels = p.prediction(id);
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <set>
#include <string>

#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/h5.h"

namespace u3d {

class PredictionsReader {
 public:
  // DataError naming the file when it is not an HDF5 predictions file; IoError when it is missing.
  explicit PredictionsReader(const std::filesystem::path& path);
  const std::filesystem::path& path() const { return path_; }
  Task task() const { return task_; }
  const std::set<std::string>& ids() const { return ids_; }
  bool has(const std::string& id) const { return ids_.count(id) > 0; }
  bool has_probabilities(const std::string& id) const;
  // (D, H, W) as `dtype`; DataError naming the file and case when absent or unreadable.
  torch::Tensor prediction(const std::string& id, torch::ScalarType dtype) const;
  // (K, D, H, W) float32.
  torch::Tensor probabilities(const std::string& id) const;
  std::string describe(const std::string& id) const;  // "<file>: case '<id>'"

 private:
  std::filesystem::path path_;
  h5::Handle file_;
  Task task_ = Task::kSegmentation;
  std::set<std::string> ids_;
};

}  // namespace u3d
