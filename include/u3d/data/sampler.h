// Random training patches from the stacked cache, deterministic in (seed, epoch, sample index).
//
// Sample i = step * batch_size + b of an epoch draws its case from a per-epoch shuffle of all cases
// (every case once per pass) and everything else from its own stream Rng(seed, epoch, i), each
// choice at a fixed position of the stream (SampleSlot), so a sample never depends on which thread,
// worker count or device built it, and a resumed run sees the batches it would have seen.
//
// PatchSampler     on the CPU: plan() per sample, then exact strided copies (crop, mirror, rot90)
//                  or resampling (affine, elastic) from the cache into a RawBatch. Thread-safe (const).
// DeviceSampler    (device_sampler.h) the same plans as tensor ops on the cache's device.
// The samplers make raw batches; BatchFinalizer (finalize.h, owned by the loader) then normalises
// and applies the intensity transforms.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/augment.h"
#include "u3d/data/batch.h"
#include "u3d/data/cache.h"
#include "u3d/data/finalize.h"

namespace u3d {

struct SamplerOptions {
  Shape3 patch = {64, 64, 64};
  int64_t batch_size = 2;
  uint64_t seed = 0;
  AugmentConfig augment;
  double foreground_fraction = 0.0;        // share of samples centred on a foreground voxel
  std::string foreground = "auto";         // data.foreground spec
  std::vector<std::string> channel_names;  // of the cached images, for foreground "channel:NAME"
  int64_t max_foreground_voxels = 10000;   // per case, subsampled deterministically (as nnU-Net)
  double pad_value = 0.0;                  // image value (normalised units) outside the volume
  bool apply_augmentation = true;          // false: plain crops (validation patches)
  // Finished images in ChannelsLast3d memory order (BatchFinalizer): set for a channels-last network
  // (resolve_channels_last, train_step.h), so the batch reaches the step in the layout it takes.
  bool channels_last_images = false;
  // Data-parallel share: batch `step` of this sampler is batch step * shards + shard of one sampler
  // with the same options, so the shards' batches together are what one process draws.
  int64_t shard = 0, shards = 1;
};

// The training sampler's options from the config (data.patch_size, batch_size, foreground,
// pad_value; experiment.seed; augment), for images whose channels are `channel_names`.
SamplerOptions sampler_options(const Config& cfg, std::vector<std::string> channel_names);

// ConfigError naming data.batch_size when one finished float32 batch of `channels` x `patch` would
// take more than half of the host memory available (MemAvailable): checked before any allocation.
void check_batch_memory(int64_t batch_size, const Shape3& patch, int64_t channels);

// Fixed positions of a sample's draws in its stream Rng(seed, epoch, index): Rng::value_at(slot).
enum SampleSlot : uint64_t {
  kSlotForeground = 0,               // bernoulli(foreground_fraction)
  kSlotVoxel,                        // which foreground voxel
  kSlotOrigin,                       // 3 slots: uniform crop origin per axis
  kSlotFlip = kSlotOrigin + 3,       // 3 slots: mirror per axis
  kSlotRot90 = kSlotFlip + 3,        // apply, then k - 1 in {0, 1, 2}
  kSlotAffine = kSlotRot90 + 2,      // apply, 3 angles, scale
  kSlotIntensity = kSlotAffine + 5,  // apply, scale, shift
  kSlotGamma = kSlotIntensity + 3,   // apply, gamma
  kSlotNoise = kSlotGamma + 2,       // apply, standard deviation
  kSlotElastic = kSlotNoise + 2,     // apply
  // 3 G^3 slots (G = elastic_grid, so the last group): control value of axis a at grid point
  // (z, y, x) in slot kSlotElasticGrid + ((a G + z) G + y) G + x (augment.h)
  kSlotElasticGrid = kSlotElastic + 1
};

// Everything one sample's randomness decided.
struct SamplePlan {
  int64_t index = 0;       // sample index in the epoch
  int64_t case_index = 0;  // in the cache
  bool centred = false;    // centred on a foreground voxel
  PatchTransform transform;
  bool affine = false;                                    // transform.matrix is not a signed permutation
  bool elastic = false;                                   // transform.displacement is defined
  double scale = 1, shift = 0, gamma = 1, noise_std = 0;  // intensity parameters (identity when not drawn)
};

class PatchSampler {
 public:
  // ConfigError when the patch is larger than a case (naming the case and both shapes) or a
  // foreground spec does not fit. Keeps a reference to `cache`.
  PatchSampler(const StackedCache& cache, SamplerOptions options);
  // Builds and owns a StackedCache from evaluation-form cases (tests, small in-memory data).
  PatchSampler(const TensorCache& cache, SamplerOptions options);

  // The finished batch `step` of `epoch` on the CPU: raw_batch() then finalizer() (tests
  // and validation patches; the training loader finalizes with its own).
  Batch batch(int64_t epoch, int64_t step) const;
  // The finalizer of this sampler's batches: its cache, augmentation, intensity channels, seed and
  // image layout (SamplerOptions::channels_last_images). Keeps a reference to the sampler's cache.
  BatchFinalizer finalizer() const;
  std::unique_ptr<BatchFinalizer> new_finalizer() const;  // the same, for an owner (it holds a mutex)
  // One finished sample (sample index i of `epoch`).
  Sample sample(int64_t epoch, int64_t index, int64_t* case_index = nullptr) const;

  SamplePlan plan(int64_t epoch, int64_t index) const;
  // A CPU raw batch of the right shapes and dtypes (pinned: page-locked, for staging).
  RawBatch allocate_raw(bool pinned = false) const;
  // Fills `out` (from allocate_raw) with batch `step` of `epoch`. A failure is a DataError naming the
  // case. Fault injection for tests (faults.h): with U3D_TEST_FAULTS=sampler_case@<case id>
  // set when the sampler is built, every sample of that case fails.
  void fill_raw(int64_t epoch, int64_t step, RawBatch& out) const;
  RawBatch raw_batch(int64_t epoch, int64_t step) const;
  // Case index of sample `index` of `epoch`.
  int64_t case_for(int64_t epoch, int64_t index) const;

  const SamplerOptions& options() const { return options_; }
  const StackedCache& cache() const { return *cache_; }
  // Per case: (K, 3) int64 foreground voxel coordinates (D, H, W); empty when not oversampling.
  const std::vector<torch::Tensor>& foreground() const { return foreground_; }
  // Input channels the intensity transforms touch (augment.intensity_channels resolved).
  const std::vector<int64_t>& intensity_channels() const { return intensity_channels_; }
  // Whether some sample may be resampled (affine or elastic): image batches are then float32.
  bool resampling_enabled() const { return options_.augment.affine_prob > 0 || options_.augment.elastic_prob > 0; }

 private:
  void init();
  void fill_sample(const SamplePlan& p, RawBatch& out, int64_t b) const;

  std::shared_ptr<StackedCache> owned_;
  const StackedCache* cache_;
  SamplerOptions options_;
  std::vector<torch::Tensor> foreground_;
  std::vector<int64_t> intensity_channels_;
  std::string fault_case_;  // U3D_TEST_FAULTS sampler_case@ID: filling this case fails (faults.h)
};

// Foreground voxels of one case under a data.foreground spec, as a (D, H, W) bool tensor.
// ConfigError when the spec does not fit the case (no mask, unknown channel, labels on regression).
torch::Tensor foreground_mask(const CachedCase& c, const std::string& spec,
                              const std::vector<std::string>& channel_names);
torch::Tensor foreground_mask(const StackedCache& cache, int64_t i, const std::string& spec,
                              const std::vector<std::string>& channel_names);

}  // namespace u3d
