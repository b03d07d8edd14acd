// Patch sampling on the cache's device (the GPU for data.cache: gpu): PatchSampler's plans
// (sampler.h) computed as tensor ops: the counter-based stream, case table, crop origins, foreground
// choice and one gather per field (and trilinear tap) of the patch voxels' columns from the field's
// channel-major planes (cache.h: an (N, S) int64 index serves every channel), all with static shapes
// and no host synchronisation, so a step
// needs no host work and can be captured in a CUDA graph. Its integer choices equal PatchSampler's
// bit for bit; affine and elastic coordinates agree to rounding (the elastic control values are the
// host's draws, upsampled by the same elastic_field(); augment.h). Batches are finalised on the
// device by the loader's BatchFinalizer (finalize.h), or, standalone, by one of the sampler's
// settings made once.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/data/batch.h"
#include "u3d/data/finalize.h"
#include "u3d/data/sampler.h"

namespace u3d {

// Sampling on the cache's device with tensor ops (see the file comment). The cache must outlive it.
class DeviceSampler {
 public:
  // `finish`: the finalizer of its batches (the loader's; it must outlive this); null: a
  // BatchFinalizer(host) of its own (tests).
  explicit DeviceSampler(const PatchSampler& host, const BatchFinalizer* finish = nullptr);

  // Uploads the case order of `epoch` (one small copy per epoch, into the same device buffer each
  // time, so a captured graph that reads it stays valid).
  void set_epoch(int64_t epoch, int64_t steps_per_epoch);
  // The device cursor: next_batch() makes batch `step` of `epoch` next. Writes the device only when
  // the epoch changes or `step` is not where the cursor already stands (a resume, a test).
  void seek(int64_t epoch, int64_t step, int64_t steps_per_epoch);
  // Batch at the cursor (finalised), then the cursor moves on by one, on the device: device work
  // only, so a CUDA graph can capture it with the training step (training.cuda_graph); each replay
  // makes the next batch. Equals batch(step) for the cursor's step. Not with noise augmentation
  // (its generator is seeded on the host per batch): capturable() says so.
  Batch next_batch();
  // Whether next_batch() can be captured in a CUDA graph; `why` gets the reason when not.
  bool capturable(std::string* why = nullptr) const;
  // Raw batch `step` (a 0-dim int64 tensor on the device, or a number) of the current epoch, on the device.
  RawBatch raw_batch(const torch::Tensor& step) const;
  RawBatch raw_batch(int64_t step) const;
  // raw_batch then the finalizer.
  Batch batch(int64_t step) const;
  int64_t epoch() const { return epoch_; }

 private:
  const PatchSampler& host_;
  std::unique_ptr<BatchFinalizer> own_finish_;  // when none was handed in
  const BatchFinalizer* finish_;
  torch::Device device_;
  int64_t epoch_ = -1;
  torch::Tensor epoch_cases_;             // (steps * batch,) int64 case per sample index of the epoch
  torch::Tensor cursor_;                  // 0-dim int64: the step next_batch() makes
  int64_t cursor_host_ = -1;              // where the device cursor stands, as the host knows it
  torch::Tensor geometry_;                // (N_cases, 4) int64: voxel offset, D, H, W
  torch::Tensor fg_voxels_;               // (sum K, 3) int64
  torch::Tensor fg_offset_, fg_count_;    // (N_cases,) int64
  torch::Tensor rot_matrices_;            // (4, 3, 3) float64: rot90 by k
  torch::Tensor pad_raw_;                 // (N_cases, C) float32: pad value in raw units per case and channel
  std::vector<torch::Tensor> field_pad_;  // per image field: (N_cases, Cf) float32
  // Constants made once, so a step issues device work only (no host-to-device copies).
  torch::Tensor epoch_key_;     // 0-dim int64: the epoch's part of every sample's stream seed
  torch::Tensor offsets_;       // (S, 3) float64: patch voxel offsets p - pc (coordinates in float64, as the host)
  torch::Tensor patch_, half_;  // (1, 3), (3,) int64: patch size and patch / 2
  torch::Tensor elastic_keys_;  // (1, 3 G^3) int64: stream offsets of slots kSlotElasticGrid + i (elastic only)
};

}  // namespace u3d
