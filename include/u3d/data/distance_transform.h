// The exact Euclidean distance transform of a 3D grid, for the ground-truth distance maps
// (truth_maps.h) and the surface metrics (evaluate/segmentation_eval.h, surface_metrics.h).
#pragma once
#include <torch/torch.h>

#include <array>

namespace u3d {

// Exact Euclidean distance in mm from every voxel of a (D, H, W) grid to the nearest true voxel of
// `features` (separable squared-distance transform of Felzenszwalb and Huttenlocher with spacing);
// float64, +inf everywhere when `features` is empty.
torch::Tensor distance_transform(const torch::Tensor& features, const std::array<double, 3>& spacing);

}  // namespace u3d
