// Tensor caches: a split decoded once at start-up, so a training step never touches the file system.
//
// TensorCache    per-case normalised float32 tensors; what validation and prediction read
//                (stack_shared(): the same memory, also as a StackedCache for validation patches).
// StackedCache   the training split pre-stacked per field in compact dtypes, in RAM, page-locked RAM
//                or GPU memory (data.cache); what the patch samplers (sampler.h) crop from.
//
// StackedCache layout: "per-case tensors in one arena", channel-major. Each field (the image
// channels of one dtype, the target, the loss mask) is one contiguous 1-D buffer viewed as planes
// (Cf, V): channel c of every case back to back in row c, V the voxels of all cases; case i's
// (D, H, W) block of channel c starts at column voxel_offset(i). Cases may differ in size; nothing
// is padded. view(field, i) is the (Cf, D, H, W) view of case i (each channel's block contiguous,
// the channels V apart); when all cases have one shape, stacked(field) is the (N, Cf, D, H, W) view
// of the same memory. A crop is a strided copy (host) or, on the device, one gather of the patch's
// (N x S) voxel columns from planes(field): one index per voxel for every channel at once.
//
// Compact dtypes: image channels are kept as raw values (after the clip of a clip:LO:HI
// normalisation) in the smallest dtype that holds every case's values exactly: uint8 (masks,
// labels 0..255), int16 (CT in HU), else float32, or float16 with data.cache_float16 (lossy).
//
// Ground-truth maps (segmentation, when CacheOptions::label_maps is set: the training loss has a
// skeleton_recall or boundary term and training.cache_truth_maps is on): the labels' skeleton
// (uint8, 1 channel) and signed distance (float16, one channel per foreground class), made once per
// case in the loading threads (data/truth_maps.h) and kept beside the labels: 1 + 2 (K - 1) more
// bytes per voxel.
// Normalisation is an affine map per case and channel applied to crops: (raw - sub) / div in
// float32, equal to Preprocessor::image. Regression targets stay in target units (float32, or
// float16 with data.cache_float16) and are divided by data.target_scale per batch; labels and
// loss masks are uint8.
#pragma once
#include <torch/torch.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/case_source.h"
#include "u3d/data/label_maps.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

struct CachedCase {
  std::string id;
  torch::Tensor image;       // (C, D, H, W) float32, normalised network input
  torch::Tensor target;      // regression: (1, D, H, W) float32 / target_scale; segmentation: (D, H, W) uint8
  torch::Tensor mask;        // (1, D, H, W) uint8 loss mask, or undefined
  torch::Tensor raw_target;  // regression: (D, H, W) float32 in target units (metrics); else undefined
  std::array<double, 3> spacing = {1, 1, 1};
};

class StackedCache;

class TensorCache {
 public:
  TensorCache() = default;
  explicit TensorCache(std::vector<CachedCase> cases) : cases_(std::move(cases)) {}
  // Reads `ids` with `threads` threads (HDF5 decoding, normalisation). Errors name the case.
  static TensorCache load(const DatasetReader& reader, const std::vector<std::string>& ids, const Preprocessor& pre,
                          int64_t threads, const CaseSource& read = {});

  int64_t size() const { return static_cast<int64_t>(cases_.size()); }
  const CachedCase& operator[](int64_t i) const { return cases_[static_cast<size_t>(i)]; }
  const std::vector<CachedCase>& cases() const { return cases_; }
  bool has_targets() const;  // every case has a target
  bool has_masks() const;    // every case has a loss mask
  int64_t bytes() const;
  // Mean of the raw target inside the loss masks (regression): the "predict the mean" baseline.
  double target_mean() const;
  Shape3 min_shape() const;  // smallest (D, H, W) over the cases

  // The cases stacked for patch sampling (nnU-Net's validation patches), held once: the returned
  // cache holds every image as float32 in one field (identity normalisation), the targets and
  // masks as they are, on the CPU (`placement` kPinned: page-locked, with CUDA); each case's image,
  // target and mask here become views into it. The cases' values do not change. raw_target stays
  // per case. label_maps and pad_to: as CacheOptions'; a case smaller than pad_to is stacked as a
  // padded copy (its own tensors stay as they are: validation predicts the case itself).
  StackedCache stack_shared(const LabelMapFn& label_maps = {}, CachePlacement placement = CachePlacement::kMemory,
                            const Shape3& pad_to = {});
  // Moves each case's tensors to page-locked memory, so their copies to the GPU are asynchronous
  // (validation on CUDA); tensors already page-locked (stack_shared's views) stay. Without CUDA: nothing.
  void pin_memory();

 private:
  std::vector<CachedCase> cases_;
};

// ---------------------------------------------------------------------------------------------
struct CacheOptions {
  CachePlacement placement = CachePlacement::kMemory;  // data.cache; auto is resolved by resolve_placement()
  torch::Device device = torch::kCPU;                  // the training device (a gpu cache lives there)
  bool float16 = false;                                // data.cache_float16
  int64_t threads = 1;                                 // loading threads
  double gpu_share = 0.5;                              // data.gpu_cache_share
  int64_t limit_bytes = -1;                            // at most this much may be used (-1: what the machine has free)
  CaseSource read;                                     // how cases are read (empty: reader.read_case)
  LabelMapFn label_maps;  // segmentation: each case's ground-truth maps, made at load (empty: none)
  // Cases smaller than this on an axis (the training patch) are padded up to it at load, centred:
  // images with their normalisation offset (0 once normalised), targets and masks with 0 (nnU-Net
  // pads a case smaller than the patch the same way). {0, 0, 0}: no padding.
  Shape3 pad_to{};
};

enum class FieldKind { kImage, kTarget, kMask, kSkeleton, kDistance };

// One field of the arena.
struct CacheField {
  FieldKind kind = FieldKind::kImage;
  torch::ScalarType dtype = torch::kFloat;
  // Image fields: the input channels this field holds, ascending; target, mask and skeleton: {0};
  // distance: {0 .. K-2}, one per foreground class.
  std::vector<int64_t> channels;
  torch::Tensor arena;  // 1-D, dtype, on the cache's device (page-locked when pinned)
  int64_t channel_count() const { return static_cast<int64_t>(channels.size()); }
  std::string name() const;  // "image[channel 0]", "image[4 channels]", "target", "mask", "skeleton", "distance"
};

class StackedCache {
 public:
  StackedCache() = default;

  // Reads `ids` (each once) with options.threads threads into the arena. The first case gives an estimate of
  // the size, which resolves auto (resolve_placement) and is checked against free RAM or free GPU
  // memory (DataError "needs X ... only Y is available"); pinned without CUDA falls back to memory
  // with a warning. Errors name the case.
  static StackedCache load(const DatasetReader& reader, const std::vector<std::string>& ids, const Preprocessor& pre,
                           const CacheOptions& options);
  // From evaluation-form cases whose images are already normalised (tests, in-memory data):
  // identity normalisation, targets already divided by their scale.
  // keep_float32: every image channel in one float32 field instead of its compact dtype.
  static StackedCache from_cases(const std::vector<CachedCase>& cases, const CacheOptions& options = {},
                                 bool keep_float32 = false);

  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  const std::string& id(int64_t i) const { return ids_[static_cast<size_t>(i)]; }
  Shape3 shape(int64_t i) const { return shapes_[static_cast<size_t>(i)]; }
  int64_t voxel_offset(int64_t i) const { return offsets_[static_cast<size_t>(i)]; }
  bool uniform_shape() const;
  Shape3 min_shape() const;

  int64_t in_channels() const { return in_channels_; }
  const std::vector<CacheField>& image_fields() const { return image_fields_; }
  const CacheField* target() const { return target_.arena.defined() ? &target_ : nullptr; }
  const CacheField* mask() const { return mask_.arena.defined() ? &mask_ : nullptr; }
  bool has_targets() const { return target() != nullptr; }
  bool has_masks() const { return mask() != nullptr; }
  // The labels' ground-truth maps (CacheOptions::label_maps): skeleton (1, D, H, W) uint8 and
  // distance (K-1, D, H, W) float16 per case; nullptr when not made.
  const CacheField* skeleton() const { return skeleton_.arena.defined() ? &skeleton_ : nullptr; }
  const CacheField* distance() const { return distance_.arena.defined() ? &distance_ : nullptr; }
  bool segmentation() const { return segmentation_; }  // target holds labels

  // (Cf, D, H, W) view of case i in a field (on the cache's device).
  torch::Tensor view(const CacheField& field, int64_t i) const;
  // (Cf, V) view of a whole field: row c holds channel c of every case, case i from column voxel_offset(i).
  torch::Tensor planes(const CacheField& field) const;
  // (N, Cf, D, H, W) view of a field when uniform_shape(); undefined otherwise.
  torch::Tensor stacked(const CacheField& field) const;
  // (D, H, W) raw view of input channel c of case i.
  torch::Tensor channel(int64_t i, int64_t c) const;

  // Normalisation per case and input channel: normalised = (raw - sub) / div. (N, C) float32, CPU.
  const torch::Tensor& norm_sub() const { return norm_sub_; }
  const torch::Tensor& norm_div() const { return norm_div_; }
  // Training target = cached target / target_scale (regression; 1 for labels).
  double target_scale() const { return target_scale_; }
  // Mean of the raw target inside the loss masks (regression): the "predict the mean" baseline.
  double target_mean() const { return target_mean_; }

  CachePlacement placement() const { return placement_; }
  torch::Device device() const { return device_; }
  int64_t bytes() const;
  double load_seconds() const { return load_seconds_; }
  // One line for the log: size, placement, dtype per field, load time.
  std::string describe() const;

 private:
  std::vector<std::string> ids_;
  std::vector<Shape3> shapes_;
  std::vector<int64_t> offsets_;  // voxel offset of each case; offsets_[N] = total voxels
  int64_t in_channels_ = 0;
  std::vector<CacheField> image_fields_;
  CacheField target_, mask_, skeleton_, distance_;
  bool segmentation_ = false;
  torch::Tensor norm_sub_, norm_div_;
  double target_scale_ = 1.0;
  double target_mean_ = 0.0;
  CachePlacement placement_ = CachePlacement::kMemory;
  torch::Device device_ = torch::kCPU;
  double load_seconds_ = 0;

  friend class StackedCacheBuilder;
};

// Resolves data.cache for a run on `device`: auto -> gpu when `needed_bytes` fit in `gpu_share`
// of the free GPU memory, else pinned; memory when training on the CPU. gpu on a CPU run is a
// ConfigError; pinned without CUDA becomes memory (with a warning, in load()).
CachePlacement resolve_placement(CachePlacement requested, double gpu_share, const torch::Device& device,
                                 int64_t needed_bytes);
// Free bytes where a placement keeps its data: MemAvailable of the host, or free GPU memory.
int64_t available_bytes(CachePlacement placement, const torch::Device& device);
// Estimated cache size of `ids` from the first case's compact dtypes and every case's shape.
int64_t estimate_cache_bytes(const DatasetReader& reader, const std::vector<std::string>& ids, const Preprocessor& pre,
                             bool float16);

}  // namespace u3d
