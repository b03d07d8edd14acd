// Random training patches from the tensor cache, deterministic in (seed, epoch, sample index).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/augment.h"
#include "u3d/cache.h"
#include "u3d/config.h"

namespace u3d {

struct Batch {
  torch::Tensor image;   // (N, C, d, h, w) float32
  torch::Tensor target;  // regression: (N, 1, d, h, w) float32; segmentation: (N, d, h, w) int64
  torch::Tensor mask;    // (N, 1, d, h, w) float32 in {0, 1}, or undefined
  std::vector<int64_t> cases;  // cache index of each sample

  Batch to(const torch::Device& device, bool non_blocking = false) const;
};

struct SamplerOptions {
  Shape3 patch = {64, 64, 64};
  int64_t batch_size = 2;
  uint64_t seed = 0;
  AugmentConfig augment;
  double foreground_fraction = 0.0;    // share of samples centred on a foreground voxel
  std::string foreground = "auto";     // data.foreground spec
  std::vector<std::string> channel_names;  // of the cached images, for foreground "channel:NAME"
  int64_t max_foreground_voxels = 10000;   // per case, subsampled deterministically (as nnU-Net)
  bool apply_augmentation = true;          // false: plain crops (validation patches)
};

class PatchSampler {
 public:
  // ConfigError when the patch is larger than a case (naming the case and both shapes).
  PatchSampler(const TensorCache& cache, SamplerOptions options);

  // Batch `step` of `epoch`. Sample i = step * batch_size + b draws its case from a per-epoch
  // shuffle of all cases (every case once per pass) and its crop origin and augmentation from
  // Rng(seed, epoch, i): the result never depends on call order or threads. With
  // foreground_fraction > 0, a sample is centred on a random foreground voxel of its case with that
  // probability (cases without foreground fall back to a uniform crop; a warning names them once).
  Batch batch(int64_t epoch, int64_t step) const;
  // One sample (exposed for tests): sample index i of `epoch`.
  Sample sample(int64_t epoch, int64_t index, int64_t* case_index = nullptr) const;

  const SamplerOptions& options() const { return options_; }

 private:
  int64_t case_for(int64_t epoch, int64_t index) const;

  const TensorCache& cache_;
  SamplerOptions options_;
  std::vector<torch::Tensor> foreground_;  // per case: (K, 3) int64 voxel coordinates (D, H, W)
};

// Foreground voxels of one case under a data.foreground spec, as a (D, H, W) bool tensor.
// ConfigError when the spec does not fit the case (no mask, unknown channel, labels on regression).
torch::Tensor foreground_mask(const CachedCase& c, const std::string& spec,
                              const std::vector<std::string>& channel_names);

}  // namespace u3d
