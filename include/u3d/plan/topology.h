// The network topology nnU-Net's planner chooses for a patch (get_pool_and_conv_props of nnU-Net
// 2.x, experiment_planning/experiment_planners/network_topology.py, re-implemented here):
// stage by stage, an axis is down-sampled (stride 2) while it keeps >= 2 x min_edge voxels and its
// current spacing is within 2x of the finest pooled-candidate axis (a single such axis needs
// >= 3 x min_edge); an axis's kernel is 1 until its current spacing is within 2x of the finest
// current spacing, 3 after (so thick-slice data gets (1, 3, 3) first); the last stage's kernel is
// 3 on every axis. Triples are (D, H, W); strides[0] is {1, 1, 1} (nnU-Net's pool_op_kernel_sizes
// and conv_kernel_sizes, our model.strides and model.kernel_sizes).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

struct Topology {
  std::vector<Shape3> strides;  // one per stage, the first {1, 1, 1}
  std::vector<Shape3> kernels;  // one per stage
  Shape3 divisor{};             // the strides' product per axis: what the patch must divide by
  int64_t stages() const { return static_cast<int64_t>(strides.size()); }
};

// `spacing`: mm per voxel of the grid the network trains on (D, H, W); `patch`: voxels. At most
// `max_stages` stages (model.levels allows 8; nnU-Net has no cap).
Topology pool_and_conv_props(const std::array<double, 3>& spacing, const Shape3& patch, int64_t min_edge = 4,
                             int64_t max_stages = 8);

}  // namespace u3d
