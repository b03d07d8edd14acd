// Raw batches to training batches: the one normalisation of network inputs (preprocess.h:
// normalize_value, shared with validation and prediction) and the intensity augmentation.
//
// Intensity (image channels only): x * scale + shift, gamma on the patch's [min, max] per channel,
// additive Gaussian noise. They run batched over a whole batch on its device, one call per
// transform per batch, with per-sample parameters from the sample's plan (batch.h: PlanColumn).
#pragma once
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/batch.h"
#include "u3d/data/cache.h"

namespace u3d {

// Turns raw batches into training batches on the raw batch's device: image fields to float32
// (N, C, d, h, w), normalised with each case's (raw - sub) / div, then the intensity transforms;
// regression targets / target_scale as (N, 1, d, h, w) float32, labels as (N, d, h, w) int64, masks
// as (N, 1, d, h, w) float32. Noise fields come from a generator seeded by (seed, epoch, step) on
// that device (so CPU and CUDA runs draw different noise; each is deterministic).
// `image_format`: the memory order of the finished images, ChannelsLast3d for a channels-last
// network (SamplerOptions::channels_last_images): on a GPU the raw fields are converted to float32
// straight into that layout (one pass), so neither the step nor a captured graph's static input
// converts again; on the CPU one more pass after normalising. The values are the same either way.
class BatchFinalizer {
 public:
  BatchFinalizer(const StackedCache& cache, const AugmentConfig& augment, std::vector<int64_t> intensity_channels,
                 uint64_t seed, at::MemoryFormat image_format = at::MemoryFormat::Contiguous);
  Batch operator()(const RawBatch& raw) const;

 private:
  struct DeviceTables {
    torch::Tensor sub, div;                     // (N_cases, C) float32
    std::vector<torch::Tensor> field_channels;  // per image field: int64 channel indices
    torch::Tensor intensity;                    // (C,) bool: channels the intensity transforms touch
  };
  const DeviceTables& tables(const torch::Device& device) const;

  const StackedCache& cache_;
  AugmentConfig augment_;
  std::vector<int64_t> intensity_channels_;
  uint64_t seed_;
  at::MemoryFormat image_format_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, DeviceTables> tables_;  // by device; nodes never move
};

}  // namespace u3d
