// Training-patch augmentation: the definitions every sampler shares.
//
// Spatial (image, target and mask together), as one map from a patch voxel to a source voxel:
//   source = centre + M (p - pc),   pc = (patch - 1) / 2,   centre = origin + pc
// with voxel centres at integer coordinates and M = A R F, where F mirrors axes (flip_matrix), R
// rotates by k * 90 degrees in a plane (rot90_matrix, as torch::rot90(x, k, plane)) and A rotates
// and scales (affine_matrix). Without A, M is a signed permutation and a patch is an exact strided
// copy in the cache's dtype; with A, images and regression targets are resampled trilinearly
// (float32) and labels and masks by nearest neighbour; voxels outside the volume are padded.
//
// Intensity (image channels only; BatchFinalizer): x * scale + shift, gamma on the patch's
// [min, max] per channel, additive Gaussian noise. They run batched over a whole batch on its
// device, one call per transform per batch, with per-sample parameters from the sample's plan.
//
// Every random choice comes from the sample's stream Rng(seed, epoch, sample index) (sampler.h),
// so a batch never depends on the number of threads or the device that built it.
#pragma once
#include <torch/torch.h>

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "u3d/cache.h"
#include "u3d/config.h"
#include "u3d/rng.h"

namespace u3d {

// One sample's patch: image (C, d, h, w), target (1, d, h, w) or (d, h, w), mask (1, d, h, w) or undefined.
struct Sample {
  torch::Tensor image;
  torch::Tensor target;
  torch::Tensor mask;
};

using Matrix3 = std::array<double, 9>;  // row-major 3x3 on (D, H, W) offsets
constexpr Matrix3 kIdentity3 = {1, 0, 0, 0, 1, 0, 0, 0, 1};
Matrix3 matmul(const Matrix3& a, const Matrix3& b);
// Mirrors the axes set in `axes`.
Matrix3 flip_matrix(const std::array<bool, 3>& axes);
// Rotation by k * 90 degrees in the plane of spatial axes (a, b), the map torch::rot90(x, k, {a, b}) applies.
Matrix3 rot90_matrix(int64_t k, int64_t a, int64_t b);
// Rotation by `degrees` about the D, H and W axes (in that order) and zoom by `scale` (> 1 magnifies).
Matrix3 affine_matrix(const std::array<double, 3>& degrees, double scale);
// Whether m is a signed permutation (every entry -1, 0 or 1, one non-zero per row and column).
bool is_signed_permutation(const Matrix3& m);

// Where a patch comes from in its case.
struct PatchTransform {
  std::array<int64_t, 3> origin{};  // corner of the patch box in the case (voxels)
  Shape3 patch{};                   // (d, h, w)
  Matrix3 matrix = kIdentity3;      // patch offset -> source offset
};

enum class Interp { kNearest, kLinear };

// Resamples one field of one case into a patch on the CPU. src: (Cf, D, H, W) contiguous, any of
// uint8/int16/float16/float32. dst: (Cf, d, h, w) contiguous; for a signed-permutation matrix an
// exact copy (dst dtype = src dtype); otherwise kLinear writes float32 (trilinear) and kNearest
// src's dtype. Voxels outside the case take pad[c] (per channel, in src units; nullptr: 0).
void resample_patch(const torch::Tensor& src, const PatchTransform& t, Interp interp, const float* pad,
                    torch::Tensor& dst);

// ---------------------------------------------------------------------------------------------
// Per-sample parameters of the batch-level transforms, one row per sample of a RawBatch::plan:
enum PlanColumn : int64_t {
  kPlanCase = 0,   // cache index of the case
  kPlanScale,      // intensity factor (1: none)
  kPlanShift,      // intensity shift (0: none)
  kPlanGamma,      // gamma (1: none)
  kPlanNoise,      // noise standard deviation (0: none)
  kPlanColumns
};

// What a sampler produces: crops in the cache's compact dtypes, before normalisation and intensity
// augmentation. Small (uint8 masks, int16 CT), so host batches cross PCIe compact.
struct RawBatch {
  std::vector<torch::Tensor> images;  // per cache image field: (N, Cf, d, h, w); float32 with affine
  torch::Tensor target;               // (N, 1, d, h, w) cache target dtype (float32 with affine), or undefined
  torch::Tensor mask;                 // (N, 1, d, h, w) uint8, or undefined
  torch::Tensor plan;                 // (N, kPlanColumns) float64
  std::vector<int64_t> cases;         // cache index per sample (host copy; empty from the device sampler)
  int64_t epoch = -1, step = -1;

  int64_t bytes() const;
  // Copies every tensor (non_blocking: pinned sources copy asynchronously on the current stream).
  RawBatch to(const torch::Device& device, bool non_blocking = false) const;
  // Copies into `dst` of the same shapes (e.g. a staging slot), non-blocking where possible.
  void copy_to(RawBatch& dst, bool non_blocking) const;
};

// A training batch on its device.
struct Batch {
  torch::Tensor image;   // (N, C, d, h, w) float32
  torch::Tensor target;  // regression: (N, 1, d, h, w) float32; segmentation: (N, d, h, w) int64
  torch::Tensor mask;    // (N, 1, d, h, w) float32 in {0, 1}, or undefined
  std::vector<int64_t> cases;  // cache index of each sample (empty when sampled on the GPU)
  int64_t epoch = -1, step = -1;

  Batch to(const torch::Device& device, bool non_blocking = false) const;
};

// Turns raw batches into training batches on the raw batch's device: image fields to float32
// (N, C, d, h, w), normalised with each case's (raw - sub) / div, then the intensity transforms;
// regression targets / target_scale as (N, 1, d, h, w) float32, labels as (N, d, h, w) int64, masks
// as (N, 1, d, h, w) float32. Noise fields come from a generator seeded by (seed, epoch, step) on
// that device (so CPU and CUDA runs draw different noise; each is deterministic).
class BatchFinalizer {
 public:
  BatchFinalizer(const StackedCache& cache, const AugmentConfig& augment, std::vector<int64_t> intensity_channels,
                 uint64_t seed);
  Batch operator()(const RawBatch& raw) const;

 private:
  struct DeviceTables {
    torch::Tensor sub, div;                    // (N_cases, C) float32
    std::vector<torch::Tensor> field_channels; // per image field: int64 channel indices
    torch::Tensor intensity;                   // (C,) bool: channels the intensity transforms touch
  };
  const DeviceTables& tables(const torch::Device& device) const;

  const StackedCache& cache_;
  AugmentConfig augment_;
  std::vector<int64_t> intensity_channels_;
  uint64_t seed_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, DeviceTables> tables_;  // by device; nodes never move
};

}  // namespace u3d
