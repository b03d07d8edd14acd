// The batch types of the input path, from the cache to the training step (one direction):
//
//   cache.h (StackedCache) -> sampler.h (PatchSampler, host) | device_sampler.h (DeviceSampler, GPU)
//     -> RawBatch -> finalize.h (BatchFinalizer: normalisation, intensity) -> Batch -> loader.h
//     (BatchLoader: ahead of the loop, on the device) -> train_step.h
#pragma once
#include <torch/torch.h>

#include <vector>

namespace u3d {

// One sample's patch: image (C, d, h, w), target (1, d, h, w) or (d, h, w), mask (1, d, h, w) or undefined.
struct Sample {
  torch::Tensor image;
  torch::Tensor target;
  torch::Tensor mask;
};

// Per-sample parameters of the batch-level transforms, one row per sample of a RawBatch::plan:
enum PlanColumn : int64_t {
  kPlanCase = 0,  // cache index of the case
  kPlanScale,     // intensity factor (1: none)
  kPlanShift,     // intensity shift (0: none)
  kPlanGamma,     // gamma (1: none)
  kPlanNoise,     // noise standard deviation (0: none)
  kPlanColumns
};

// What a sampler produces: crops in the cache's compact dtypes, before normalisation and intensity
// augmentation. Small (uint8 masks, int16 CT), so host batches cross PCIe compact.
struct RawBatch {
  std::vector<torch::Tensor> images;  // per cache image field: (N, Cf, d, h, w); float32 with affine
  torch::Tensor target;               // (N, 1, d, h, w) cache target dtype (float32 with affine), or undefined
  torch::Tensor mask;                 // (N, 1, d, h, w) uint8, or undefined
  // The cache's ground-truth maps (StackedCache::skeleton / distance), cropped like the labels:
  torch::Tensor skeleton;      // (N, 1, d, h, w) uint8, nearest neighbour; or undefined
  torch::Tensor distance;      // (N, Cd, d, h, w) float16 (float32 when resampled, trilinear); or undefined
  torch::Tensor plan;          // (N, kPlanColumns) float64
  std::vector<int64_t> cases;  // cache index per sample (host copy; empty from the device sampler)
  int64_t epoch = -1, step = -1;

  int64_t bytes() const;
  // Copies every tensor (non_blocking: pinned sources copy asynchronously on the current stream).
  RawBatch to(const torch::Device& device, bool non_blocking = false) const;
  // Copies into `dst` of the same shapes (e.g. a staging slot), non-blocking where possible.
  void copy_to(RawBatch& dst, bool non_blocking) const;
};

// The ground truth's skeleton and signed distance of a segmentation batch, made once per case when
// the cache loads (data/truth_maps.h, training.cache_truth_maps) and cropped with the patch, for the
// skeleton_recall and boundary loss terms; undefined: those terms make them from the labels per batch.
struct TruthMaps {
  torch::Tensor skeleton;  // (N, d, h, w) uint8: class k (1..K-1) on class k's skeleton, else 0
  torch::Tensor distance;  // (N, K-1, d, h, w) float32: signed Euclidean distance to class k's
                           // boundary in voxels, < 0 inside (-1 on its boundary voxels), > 0 outside
};

// A training batch on its device.
struct Batch {
  torch::Tensor image;         // (N, C, d, h, w) float32
  torch::Tensor target;        // regression: (N, 1, d, h, w) float32; segmentation: (N, d, h, w) int64
  torch::Tensor mask;          // (N, 1, d, h, w) float32 in {0, 1}, or undefined
  TruthMaps maps;              // segmentation with cached ground-truth maps; else empty
  std::vector<int64_t> cases;  // cache index of each sample (empty when sampled on the GPU)
  int64_t epoch = -1, step = -1;

  Batch to(const torch::Device& device, bool non_blocking = false) const;
};

}  // namespace u3d
