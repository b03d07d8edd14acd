// Private to src/data: one case as the caches read it, each input channel in its smallest exact
// storage (uint8, int16, else float32 or float16), before it is copied into a cache's arena.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/case_source.h"
#include "u3d/data/label_maps.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/dataset.h"

namespace u3d::cache_detail {

// Smallest exact storage of a channel: 0 uint8, 1 int16, 2 floating point.
enum Compact : int { kCompactUInt8 = 0, kCompactInt16 = 1, kCompactFloat = 2 };

struct CompactCase {
  std::string id;
  Shape3 shape{};
  std::vector<torch::Tensor> channels;  // per input channel: (D, H, W) in its own compact dtype
  std::vector<int> kinds;               // Compact per channel
  std::vector<float> sub, div;          // normalisation per channel
  torch::Tensor target;                 // (D, H, W) float32 raw target, or uint8 labels; or undefined
  torch::Tensor mask;                   // (D, H, W) uint8, or undefined
  torch::Tensor skeleton;               // (D, H, W) uint8 ground-truth skeleton, or undefined
  torch::Tensor distance;               // (Cd, D, H, W) float16 signed distance, or undefined
  double target_sum = 0, target_count = 0;
  double read_seconds = 0;  // HDF5 read and decompression
  double maps_seconds = 0;  // add_label_maps
  bool padded = false;      // pad_case made it larger
};

// The smallest exact kind for `x` ((D, H, W) float32, contiguous): whole numbers in [0, 255] or
// [-32768, 32767] fit uint8 or int16.
Compact compact_kind(const torch::Tensor& x);
// The storage dtype of a Compact kind (floating point: float16 when `float16`).
torch::ScalarType compact_dtype(int kind, bool float16);
// "uint8", "int16", "float16", "float32" (cache descriptions).
std::string dtype_name(torch::ScalarType t);
// `read` when set, else the reader's plain read_case.
CaseSource source_or_reader(const DatasetReader& reader, const CaseSource& read);
// Reads case `id` through `read`, selects and clamps the channels (pre), stores each compactly.
CompactCase compact_case(const CaseSource& read, const std::string& id, const Preprocessor& pre, bool float16);
// Adds the ground-truth maps of c's labels (c.target uint8) through `make`; nothing when `make` is
// empty or c has no labels. Errors name the case.
void add_label_maps(CompactCase& c, const LabelMapFn& make);

// `t` (..., D, H, W) padded with `value` up to `to` on each axis where it is smaller, centred (half the
// padding before, the rest after), as nnU-Net pads cases smaller than the patch; `t` itself when no
// axis is smaller.
torch::Tensor pad_centred(const torch::Tensor& t, const Shape3& to, double value);
// c padded up to `to` (pad_centred): each image channel with its normalisation offset `sub` (about 0
// once normalised; nnU-Net pads normalised images with 0), the target and the mask with 0
// (background; no loss where a mask exists); c.padded is then set. The target's mean (target_sum)
// counts the case's own voxels.
void pad_case(CompactCase& c, const Shape3& to);

inline int64_t voxels(const Shape3& s) { return s[0] * s[1] * s[2]; }
// "GPU memory", "page-locked RAM", "RAM" (messages; cache_placement.cpp).
std::string placement_text(CachePlacement p);
// The cache size in bytes of `ids` from the first case (already loaded: its compact dtypes) and
// every case's shape (cache_placement.cpp).
int64_t estimate_from(const CompactCase& first, const DatasetReader& reader, const std::vector<std::string>& ids,
                      bool float16);

}  // namespace u3d::cache_detail
