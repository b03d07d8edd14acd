// Ground-truth maps for the skeleton_recall and boundary loss terms, made once per case when the
// training cache loads (CPU, in the loading threads; data.cache keeps them beside the labels and
// both samplers crop them with every patch: cache.h, sampler.h) instead of from every batch's labels.
//
// Per case, from its labels (D, H, W) uint8 with classes 0..K-1 (any label >= K, the ignore label,
// reads as background):
//   skeleton  (D, H, W) uint8: k on the soft skeleton of class k's binary mask (train/
//             topology_losses.h's soft_skeleton, exactly, with training.skeleton_iterations,
//             computed here on bool volumes; of the whole case, so a patch border
//             makes no skeleton), 0 elsewhere; classes 1..K-1 (their skeletons never overlap).
//   distance  (K-1, D, H, W) float32: signed Euclidean distance to the boundary of class k = 1..K-1,
//             in voxels: outside the class the distance to its nearest voxel (>= 1), inside minus
//             the distance to the nearest voxel of another class (<= -1; -1 on its boundary
//             voxels); never 0. Clamped to +-kDistanceCap (an empty class: +cap everywhere).
// Made here in data/, handed to the cache as CacheOptions::label_maps (truth_map_maker); which maps
// a run needs is the loss list's decision (train/losses.h: truth_map_options). With deep
// supervision the lower outputs take them down-sampled (losses.h: downsample_maps).
#pragma once
#include <torch/torch.h>

#include "u3d/data/batch.h"
#include "u3d/data/cache.h"

namespace u3d {

constexpr double kDistanceCap = 1024.0;  // voxels; float16 holds whole numbers exactly up to 2048

// The maps above of one case: labels (D, H, W) integer, on the CPU.
torch::Tensor label_skeleton(const torch::Tensor& labels, int64_t num_classes, int64_t iterations);
torch::Tensor signed_distance(const torch::Tensor& labels, int64_t num_classes);

// What the loss list needs made; false and false: no maps (the cache holds none).
struct TruthMapOptions {
  bool skeleton = false;  // skeleton_recall is a term
  bool distance = false;  // boundary is a term
  int64_t num_classes = 2;
  int64_t skeleton_iterations = 3;
};
// The cache's LabelMapFn for these options; empty when neither map is wanted.
LabelMapFn truth_map_maker(const TruthMapOptions& options);

// The maps of a batch of labels (N, d, h, w) integer, made per sample on the CPU and returned on
// the labels' device in Batch's layout (the step benchmark's synthetic batches); empty when
// `options` wants none.
TruthMaps truth_maps_of(const torch::Tensor& labels, const TruthMapOptions& options);

}  // namespace u3d
