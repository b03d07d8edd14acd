// nnU-Net's GPU memory model (nnunetv2's ExperimentPlanner: static_estimate_VRAM_usage and its
// reference values), for `trainer plan --memory-model nnunet`, which then writes nnU-Net's own plan.
// The estimate is a count, not bytes: the elements of every convolution output of nnU-Net's
// PlainConvUNet for one sample (dynamic_network_architectures' compute_conv_feature_map_size):
// each encoder stage's two convolutions at the stage's output size, and per decoder stage its two
// convolutions, the transposed convolution's output and (the last stage only: the planner builds the
// network without deep supervision) the segmentation head, each at the skip's size. Sizes shrink by
// integer division per stride, as in nnU-Net.
//
//   const int64_t e = nnunet_feature_map_elements(topology, {32, 320}, /*out_ch=*/3, patch);
//   const NnUNetReference r = nnunet_reference(/*two_d=*/false, /*target_gib=*/8);
//   bool fits = e * 2 / r.batch <= r.elements;  // nnU-Net: estimate / ref_bs * 2 <= reference
//   int64_t batch = std::llround(r.elements / e * r.batch);
#pragma once
#include <cstdint>

#include "u3d/core/config.h"
#include "u3d/plan/topology.h"

namespace u3d {

// Filters per stage: min(max_filters, base_filters x 2^stage) (nnU-Net: 32 -> 320 in 3d, 512 in 2d).
struct FilterRange {
  int64_t base = 32, max = 320;
};

// Elements of every convolution output for one sample of `patch` (D, H, W; a 2D plan: 1 on its slice
// axis, with stride 1 there). `out_ch`: classes including background.
double nnunet_feature_map_elements(const Topology& t, FilterRange filters, int64_t out_ch, const Shape3& patch);

// nnU-Net's reference: 560e6 elements at batch 2 (3d) or 85e6 at batch 12 (2d) for 8 GB, scaled
// linearly to `target_gib` (nnU-Net's UNet_vram_target_GB, default 8).
struct NnUNetReference {
  double elements = 0;
  int64_t batch = 2;
};
NnUNetReference nnunet_reference(bool two_d, double target_gib);

}  // namespace u3d
