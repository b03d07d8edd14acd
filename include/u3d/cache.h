// The in-RAM tensor cache: a split decoded once at start-up into ready-to-crop tensors, so a
// training step never touches the file system.
#pragma once
#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

#include "u3d/dataset.h"
#include "u3d/preprocess.h"

namespace u3d {

struct CachedCase {
  std::string id;
  torch::Tensor image;   // (C, D, H, W) float32, normalised network input
  torch::Tensor target;  // regression: (1, D, H, W) float32 / target_scale; segmentation: (D, H, W) uint8
  torch::Tensor mask;    // (1, D, H, W) uint8 loss mask, or undefined
  torch::Tensor raw_target;  // regression: (D, H, W) float32 in target units (metrics); else undefined
  std::array<double, 3> spacing = {1, 1, 1};
};

class TensorCache {
 public:
  TensorCache() = default;
  explicit TensorCache(std::vector<CachedCase> cases) : cases_(std::move(cases)) {}
  // Reads `ids` with `threads` threads (HDF5 decoding, normalisation). Errors name the case.
  static TensorCache load(const DatasetReader& reader, const std::vector<std::string>& ids,
                          const Preprocessor& pre, int64_t threads);

  int64_t size() const { return static_cast<int64_t>(cases_.size()); }
  const CachedCase& operator[](int64_t i) const { return cases_[static_cast<size_t>(i)]; }
  const std::vector<CachedCase>& cases() const { return cases_; }
  bool has_targets() const;  // every case has a target
  bool has_masks() const;    // every case has a loss mask
  int64_t bytes() const;
  // Mean of the raw target inside the loss masks (regression): the "predict the mean" baseline.
  double target_mean() const;
  Shape3 min_shape() const;  // smallest (D, H, W) over the cases

 private:
  std::vector<CachedCase> cases_;
};

}  // namespace u3d
