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
// Elastic (augment.elastic_prob, elastic_magnitude, elastic_grid): with probability elastic_prob a
// smooth random displacement is added in the same single resampling:
//   source = centre + M (p - pc) + disp(p)
// disp: (3, d, h, w) float32, voxels along the case's (D, H, W) axes, per patch voxel p: the
// trilinear upsampling (align_corners = true: the G x G x G control grid spans the patch's corner
// voxels; elastic_field()) of control values uniform in [-elastic_magnitude, elastic_magnitude],
// G = elastic_grid, so neighbouring voxels' displacements differ by at most
// 2 magnitude (G - 1) / (patch - 1) per axis. A sample with a displacement always takes the
// resampling path (trilinear images and regression targets, nearest-neighbour labels and masks, so
// label values are kept), even where M is a signed permutation.
//
// Slices (model.dims 2: the patch is 1 along one axis, slice_axis_of(patch)): the transforms stay in
// the slice's plane. Only the rotation about the slice axis is drawn and applied (each draw has its own
// slot, so leaving the others out changes no other choice); the elastic displacement's component along
// the slice axis is 0.
// Flips along it and a rot90 plane that holds it would leave the plane too: keep augment.flip_axes
// and augment.rot90_plane in-plane (the slice's flip is a no-op on a 1-voxel axis).
//
// Intensity (image channels only): applied batched by BatchFinalizer (finalize.h).
//
// Every random choice comes from the sample's stream Rng(seed, epoch, sample index) (sampler.h),
// so a batch never depends on the number of threads or the device that built it. Elastic draws
// come after every other draw of the stream: slot kSlotElastic (whether), then the 3 G^3 control
// values at kSlotElasticGrid + ((a G + z) G + y) G + x (axis a: 0 D, 1 H, 2 W), so with
// elastic_prob = 0 every other choice is what it was without the feature, bit for bit.
#pragma once
#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/rng.h"

namespace u3d {

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
// The axis along which `patch` is a single voxel while the others are not (a slice: model.dims 2),
// or -1.
int64_t slice_axis_of(const Shape3& patch);

// Where a patch comes from in its case.
struct PatchTransform {
  std::array<int64_t, 3> origin{};  // corner of the patch box in the case (voxels)
  Shape3 patch{};                   // (d, h, w)
  Matrix3 matrix = kIdentity3;      // patch offset -> source offset
  torch::Tensor displacement;       // (3, d, h, w) float32 voxels added to the source; undefined: none
};

// The elastic displacement of control points: control (N, 3, G, G, G) float32 voxels, G >= 2 ->
// (N, 3, d, h, w) float32, trilinear with align_corners = true (interpolate; the host and the
// device sampler both call this, so they agree to rounding).
torch::Tensor elastic_field(const torch::Tensor& control, const Shape3& patch);

enum class Interp { kNearest, kLinear };

// Resamples one field of one case into a patch on the CPU. src: (Cf, D, H, W), each channel's
// block contiguous and the channels any stride apart (a StackedCache view), any of
// uint8/int16/float16/float32. dst: (Cf, d, h, w) contiguous; for a signed-permutation matrix
// without displacement an exact copy (dst dtype = src dtype); otherwise kLinear writes float32
// (trilinear) and kNearest src's dtype. Voxels outside the case take pad[c] (per channel, in src
// units; nullptr: 0).
void resample_patch(const torch::Tensor& src, const PatchTransform& t, Interp interp, const float* pad,
                    torch::Tensor& dst);

}  // namespace u3d
