// The per-stage geometry of the U-Nets (model.architecture unet and resenc_unet), nnU-Net's
// conv_kernel_sizes and pool_op_kernel_sizes: stage l (0 = full resolution) convolves with
// stage_kernel(m, l), its first convolution has the stride stage_stride(m, l), and the decoder
// up-samples stage l + 1 to stage l by a transposed convolution of kernel = stride = stage_stride(m, l + 1).
// All triples are (D, H, W) in voxels. The defaults (model.kernel_sizes and model.strides empty)
// are today's network: model.kernel_size on every axis, stride 1 at stage 0 and 2 on every axis after.
#pragma once
#include "u3d/core/config.h"

namespace u3d {

// With model.dims 2 (a 2D U-Net on slices) every triple is 1 on the slice axis (model.slice_axis):
// the kernel, the stride and the patch; the network convolves the two other axes (in_plane).

// model.kernel_sizes[level], or model.kernel_size on every axis (1 on the slice axis with dims 2).
Shape3 stage_kernel(const ModelConfig& m, int64_t level);
// model.strides[level], or {1, 1, 1} at level 0 and {2, 2, 2} after (1 on the slice axis with dims 2).
Shape3 stage_stride(const ModelConfig& m, int64_t level);
// The down-sampling of stage `level` per axis: the product of stage_stride(m, 0 .. level).
Shape3 stage_scale(const ModelConfig& m, int64_t level);
// What every spatial size of a network input must divide by, per axis: stage_scale(m, levels - 1).
Shape3 patch_divisor(const ModelConfig& m);

// The two axes of `s` other than `slice_axis`, in order: (H, W) for slice_axis 0.
Shape2 in_plane(const Shape3& s, int64_t slice_axis);

// model.dims 2, applied by load_config before validate(): model.slice_axis = data.slice_axis, and a
// cubic data.patch_size (one number) becomes 1 on that axis; any other patch not 1 there is a
// ConfigError naming data.patch_size. Nothing with dims 3.
void resolve_slices(Config& cfg);

// ConfigError (one line naming the key) unless model.kernel_sizes and model.strides are empty or
// hold model.levels triples each; kernels odd and >= 1; strides 1 or 2 per axis and {1, 1, 1} at
// stage 0; both only for unet and resenc_unet; model.dims 2 only for those, with kernels and strides 1 on
// the slice axis. Called by validate().
void validate_stage_geometry(const Config& cfg);

}  // namespace u3d
