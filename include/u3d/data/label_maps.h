// Per-case fields derived from a case's labels, made once when a cache loads: the loss terms'
// ground-truth maps. data/truth_maps.h makes them (truth_map_maker); the caches (cache.h:
// CacheOptions::label_maps, TensorCache::stack_shared) only store and crop them.
#pragma once
#include <torch/torch.h>

#include <functional>

namespace u3d {

struct LabelMaps {
  torch::Tensor skeleton;  // (D, H, W) uint8: class k on class k's skeleton, else 0; or undefined
  torch::Tensor distance;  // (Cd, D, H, W) float32 signed distance per foreground class, voxels; or undefined
};
// labels: (D, H, W) uint8 as cached (the ignore label included), on the CPU.
using LabelMapFn = std::function<LabelMaps(const torch::Tensor& labels)>;

}  // namespace u3d
