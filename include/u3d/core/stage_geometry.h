// The per-stage geometry of the U-Nets (model.architecture unet and resenc_unet), nnU-Net's
// conv_kernel_sizes and pool_op_kernel_sizes: stage l (0 = full resolution) convolves with
// stage_kernel(m, l), its first convolution has the stride stage_stride(m, l), and the decoder
// up-samples stage l + 1 to stage l by a transposed convolution of kernel = stride = stage_stride(m, l + 1).
// All triples are (D, H, W) in voxels. The defaults (model.kernel_sizes and model.strides empty)
// are today's network: model.kernel_size on every axis, stride 1 at stage 0 and 2 on every axis after.
#pragma once
#include "u3d/core/config.h"

namespace u3d {

// model.kernel_sizes[level], or model.kernel_size on every axis.
Shape3 stage_kernel(const ModelConfig& m, int64_t level);
// model.strides[level], or {1, 1, 1} at level 0 and {2, 2, 2} after.
Shape3 stage_stride(const ModelConfig& m, int64_t level);
// The down-sampling of stage `level` per axis: the product of stage_stride(m, 0 .. level).
Shape3 stage_scale(const ModelConfig& m, int64_t level);
// What every spatial size of a network input must divide by, per axis: stage_scale(m, levels - 1).
Shape3 patch_divisor(const ModelConfig& m);

// ConfigError (one line naming the key) unless model.kernel_sizes and model.strides are empty or
// hold model.levels triples each; kernels odd and >= 1; strides 1 or 2 per axis and {1, 1, 1} at
// stage 0; both only for unet and resenc_unet. Called by validate().
void validate_stage_geometry(const Config& cfg);

}  // namespace u3d
