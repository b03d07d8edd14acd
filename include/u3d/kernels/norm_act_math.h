// The arithmetic of the fused normalisation + activation kernels (kernels/fused_norm_act.h), one
// copy for the CUDA kernels (src/kernels/norm_act.cu) and the CPU test that checks it against ATen
// (tests/unit/kernels/norm_act_math_test.cpp). Plain C++ with no torch and no CUDA headers: under
// nvcc every function is __host__ __device__, under a host compiler an ordinary inline function.
//
// Terms, for one statistics unit (batch norm: one channel over N x S voxels; group norm: one sample
// and one group of Cg channels over S voxels; instance norm is group norm with Cg = 1):
//   Moments       count, mean and M2 (sum of squared deviations) of the unit's values, float32,
//                 merged pairwise (Chan et al.) so the order of merging is fixed (deterministic)
//   mean, rstd    the unit's mean and 1 / sqrt(var + eps), var = M2 / count (biased, as ATen)
//   scale, shift  per channel: scale = rstd * weight[c], shift = bias[c] - mean * scale, so the
//                 forward is y = act(x * scale + shift) in one pass
//   slope         the activation as one number: relu 0, leaky_relu its negative slope, none 1;
//                 act(z) = z > 0 ? z : z * slope, act'(z) = z > 0 ? 1 : slope
// Backward, with g = dy * act'(z) recomputed from the saved input (z = x * scale + shift), and the
// unit's sums over its voxels and channels of g * weight and g * weight * xhat (xhat = (x - mean) *
// rstd), divided by the unit's element count M (a and b below):
//   dx = rstd * (g * weight[c] - a - xhat * b) = g * cg + x * cx + c0,
//   cg = rstd * weight[c], cx = -rstd^2 * b, c0 = rstd * (rstd * b * mean - a)
//   dweight[c] = sum of g * xhat, dbias[c] = sum of g (over the batch and every voxel).
#pragma once

#include <math.h>

#if defined(__CUDACC__)
#define U3D_HD __host__ __device__ __forceinline__
#else
#define U3D_HD inline
#endif

namespace u3d::kernels {

// Count, mean and M2 of a set of values (float32).
struct Moments {
  float count = 0.f;
  float mean = 0.f;
  float m2 = 0.f;
};

// Welford's update with one value.
U3D_HD void moments_add(Moments& m, float v) {
  m.count += 1.f;
  const float d = v - m.mean;
  m.mean += d / m.count;
  m.m2 += d * (v - m.mean);
}

// The moments of the union of two disjoint sets (Chan et al.); either may be empty.
U3D_HD Moments moments_merge(const Moments& a, const Moments& b) {
  if (a.count == 0.f) return b;
  if (b.count == 0.f) return a;
  Moments r;
  r.count = a.count + b.count;
  const float d = b.mean - a.mean;
  const float fb = b.count / r.count;
  r.mean = a.mean + d * fb;
  r.m2 = a.m2 + b.m2 + d * d * a.count * fb;
  return r;
}

// The activation as a slope below zero (relu 0, leaky_relu its slope, none 1).
U3D_HD float activate(float z, float slope) { return z > 0.f ? z : z * slope; }
U3D_HD float activation_grad(float z, float slope) { return z > 0.f ? 1.f : slope; }

// Per channel of a unit: what the forward applies and the backward needs.
struct ChannelAffine {
  float scale = 1.f;  // rstd * weight
  float shift = 0.f;  // bias - mean * scale
  float mean = 0.f;   // the unit's mean
  float rstd = 1.f;   // the unit's 1 / sqrt(var + eps)
};

// The channel's affine from its unit's moments.
U3D_HD ChannelAffine channel_affine(const Moments& unit, float eps, float weight, float bias) {
  ChannelAffine a;
  const float var = unit.count > 0.f ? (unit.m2 > 0.f ? unit.m2 / unit.count : 0.f) : 0.f;
  a.mean = unit.mean;
  a.rstd = 1.f / sqrtf(var + eps);
  a.scale = a.rstd * weight;
  a.shift = bias - a.mean * a.scale;
  return a;
}

// The unit's unbiased variance (batch norm's running_var update), 0 for a single value.
U3D_HD float unbiased_var(const Moments& unit) { return unit.count > 1.f ? unit.m2 / (unit.count - 1.f) : 0.f; }

// Per-channel sums of the backward pass over a set of voxels: sum of g and sum of g * (x - mean).
struct GradSums {
  float g = 0.f;
  float gxc = 0.f;
};

U3D_HD void grad_sums_add(GradSums& s, float dy, float x, const ChannelAffine& a, float slope) {
  const float g = dy * activation_grad(x * a.scale + a.shift, slope);
  s.g += g;
  s.gxc += g * (x - a.mean);
}

U3D_HD GradSums grad_sums_merge(const GradSums& a, const GradSums& b) { return {a.g + b.g, a.gxc + b.gxc}; }

// dx = g * cg + x * cx + c0 for one channel.
struct DxCoefficients {
  float cg = 0.f;
  float cx = 0.f;
  float c0 = 0.f;
};

// The coefficients of a channel: `a` and `b` are the unit's sums of g * weight and g * weight * xhat
// over all its channels, each already divided by the unit's element count.
U3D_HD DxCoefficients dx_coefficients(const ChannelAffine& aff, float weight, float a, float b) {
  DxCoefficients k;
  k.cg = aff.rstd * weight;
  k.cx = -aff.rstd * aff.rstd * b;
  k.c0 = aff.rstd * (aff.rstd * b * aff.mean - a);
  return k;
}

U3D_HD float dx_value(float dy, float x, const ChannelAffine& aff, const DxCoefficients& k, float slope) {
  const float g = dy * activation_grad(x * aff.scale + aff.shift, slope);
  return g * k.cg + x * k.cx + k.c0;
}

}  // namespace u3d::kernels
