// Maps raw dataset values to network inputs and targets and back; one object shared by training,
// validation and prediction so the three always agree.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/normalize_spec.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

// data.normalize with each `dataset` entry replaced by the spec the file records for that input
// channel (DatasetInfo::channel_normalization; zscore when it records none), one entry per input
// channel when any was replaced, else unchanged. The trainer stores the result in the run's config,
// so checkpoints carry the statistics and prediction applies them to any file.
std::vector<std::string> resolve_normalization(const DataConfig& data, const DatasetInfo& info);

// The one normalisation of network inputs, per case and input channel: (raw - sub) / div in float32
// (raw after the clamp of clip:LO:HI). Training batches (finalize.h), validation and prediction
// (Preprocessor::image) all apply it through these two functions, so they agree bit for bit.
inline float normalize_value(float raw, float sub, float div) { return (raw - sub) / div; }
// In place on float32 `x`; `sub` and `div` float32, broadcast against x: (C, 1, 1, 1) for one case,
// (N, C, 1, 1, 1) for a batch.
void normalize_(torch::Tensor& x, const torch::Tensor& sub, const torch::Tensor& div);

// A regression target in training units: `raw` (any shape and dtype, target units) as float32
// times the float reciprocal of `target_scale`. A product, not a division: CUDA divides by a scalar
// as a product with its reciprocal while the CPU divides, and only the product gives the same bits
// on both (GPU-sampled batches equal host-sampled ones and the evaluation tensors, bit for bit).
torch::Tensor scale_target(const torch::Tensor& raw, double target_scale);

class Preprocessor {
 public:
  // Resolves data.channels against the file's channel names (ConfigError naming the unknown one).
  Preprocessor(const DataConfig& data, const DatasetInfo& info);

  // (C_file, D, H, W) raw -> (C, D, H, W) float32: selected channels, normalised.
  // select_channels(), then normalize_() with channel_affines().
  torch::Tensor image(const torch::Tensor& raw) const;

  // The normalisation of one channel of one case as an affine map after an optional clamp, so a cache
  // can keep raw values in a compact dtype and normalise crops later with the same result:
  // normalised = (clamp(raw, lo, hi) - sub) / div, computed in float32.
  struct ChannelAffine {
    bool clamp = false;
    double lo = 0, hi = 0;  // clamp bounds (clip:LO:HI)
    float sub = 0, div = 1;
  };
  // (C_file, D, H, W) raw -> (C, D, H, W) float32: the selected channels, clamped where the
  // normalisation is clip:LO:HI, not yet normalised.
  torch::Tensor select_channels(const torch::Tensor& raw) const;
  // Per selected channel of one case, from select_channels()'s result (zscore takes its statistics).
  std::vector<ChannelAffine> channel_affines(const torch::Tensor& selected) const;
  // Regression targets are divided by this for training (data.target_scale).
  double target_scale() const { return target_scale_; }
  // Regression: (D, H, W) in target units -> (1, D, H, W) float32 divided by data.target_scale
  // (as scale_target does).
  // Segmentation: (D, H, W) uint8 labels, unchanged.
  torch::Tensor target(const torch::Tensor& raw) const;
  // Network output (N, 1, ...) in training units -> target units (multiplied by data.target_scale).
  torch::Tensor restore_target(const torch::Tensor& out) const;

  int64_t in_channels() const { return static_cast<int64_t>(indices_.size()); }
  // Output channels of the network: 1 for regression, num_classes for segmentation.
  int64_t out_channels() const;
  Task task() const { return task_; }
  const std::vector<std::string>& channel_names() const { return names_; }

 private:
  Task task_;
  int64_t num_classes_;
  double target_scale_;
  std::vector<int64_t> indices_;  // file channel index per input channel
  std::vector<std::string> names_;
  std::vector<ChannelNorm> norms_;  // per input channel
};

// The one way in to the normalisation of network inputs, for training (train/resolve.h: the
// caches and the batch finalizer take this Preprocessor's channel_affines) and prediction
// (predict/resolve_prediction.h: each case through Preprocessor::image): data.normalize's `dataset`
// entries resolved against the file (resolve_normalization, written back into `data`, so the run's
// config and its checkpoints carry the statistics), then the Preprocessor of `data` for `info`.
// A checkpoint's config has no `dataset` entry left, so prediction applies its specs unchanged.
std::shared_ptr<const Preprocessor> make_preprocessor(DataConfig& data, const DatasetInfo& info);

}  // namespace u3d
