// The per-voxel arithmetic of the fused region losses (kernels/fused_loss.h), one copy for the CUDA
// kernels (src/kernels/loss.cu) and the CPU test that checks it against ATen's losses
// (tests/unit/kernels/loss_math_test.cpp). Plain C++ with no torch and no CUDA headers: under nvcc
// every function is __host__ __device__, under a host compiler an ordinary inline function (the
// U3D_HD of kernels/norm_act_math.h).
//
// Terms, for one voxel of sample n with logits x (float32, upcast from the logits' dtype) and label l:
//   softmax head  K classes, p = softmax(x), y_k = [l == k]; ce = logsumexp(x) - x_l
//   sigmoid head  C = K - 1 channels, p_c = sigmoid(x_c), y_c = [l == c + 1];
//                 bce_c = max(x_c, 0) - x_c y_c + log1p(exp(-|x_c|))
//   A label outside the classes (softmax: [0, K); sigmoid: [0, C]) has y = 0 in every channel: the
//   softmax head adds no ce for it, the sigmoid head's bce counts it as background, and its p counts
//   in psum (not checked: the kernels read nothing back to the host; ATen's path stops on it).
// Table (per sample, float32, RegionColumns): inter_k = sum_v p_k y_k, psum_k = sum_v p_k,
// ysum_k = sum_v y_k, and the sample's sum of ce (bce: over its channels too).
// Backward, with the gradients of the table's columns g_inter (K), g_psum (K) and g_ce of sample n:
//   softmax  a_k = g_inter_k y_k + g_psum_k;  dx_j = g_ce (p_j - y_j) + p_j (a_j - sum_k a_k p_k)
//   sigmoid  dx_c = g_ce (p_c - y_c) + p_c (1 - p_c) (g_inter_c y_c + g_psum_c)
#pragma once

#include <math.h>
#include <stdint.h>

#include "u3d/kernels/norm_act_math.h"  // U3D_HD

namespace u3d::kernels {

// Channels of the logits the fused losses take (the kernels keep a voxel's logits in registers).
constexpr int64_t kMaxLossChannels = 64;

// The columns of a sample's row of the table, for `channels` channels (softmax: K, sigmoid: K - 1).
struct RegionColumns {
  int64_t channels = 0;
  U3D_HD int64_t inter(int64_t k) const { return k; }
  U3D_HD int64_t psum(int64_t k) const { return channels + k; }
  U3D_HD int64_t ysum(int64_t k) const { return 2 * channels + k; }
  U3D_HD int64_t ce() const { return 3 * channels; }
  U3D_HD int64_t width() const { return 3 * channels + 1; }
};

// The target of channel k for label l: softmax y_k = [l == k]; sigmoid y_c = [l == c + 1].
U3D_HD float region_target(int64_t label, int64_t k, bool sigmoid) {
  return label == (sigmoid ? k + 1 : k) ? 1.f : 0.f;
}

// The largest of a voxel's logits (the softmax's shift).
U3D_HD float softmax_shift(float shift, float x) { return x > shift ? x : shift; }

// logsumexp(x) from the shift m and sum_k exp(x_k - m).
U3D_HD float softmax_lse(float shift, float exp_sum) { return shift + logf(exp_sum); }

U3D_HD float softmax_prob(float x, float lse) { return expf(x - lse); }

// The voxel's cross-entropy: logsumexp(x) - x_l; 0 for a label outside the classes (x_label unused).
U3D_HD float softmax_ce(float lse, float x_label, bool label_valid) { return label_valid ? lse - x_label : 0.f; }

U3D_HD float sigmoid_prob(float x) { return 1.f / (1.f + expf(-x)); }

// Binary cross-entropy with logits, in the stable form ATen uses.
U3D_HD float sigmoid_bce(float x, float y) { return fmaxf(x, 0.f) - x * y + log1pf(expf(-fabsf(x))); }

// a_k of the softmax backward: the gradient reaching p_k from the table.
U3D_HD float softmax_grad_weight(float y, float g_inter, float g_psum) { return g_inter * y + g_psum; }

// dx_j of the softmax head; pa = sum_k a_k p_k over the voxel's classes.
U3D_HD float softmax_dx(float p, float y, float a, float pa, float g_ce) { return g_ce * (p - y) + p * (a - pa); }

// dx_c of the sigmoid head.
U3D_HD float sigmoid_dx(float p, float y, float g_inter, float g_psum, float g_ce) {
  return g_ce * (p - y) + p * (1.f - p) * (g_inter * y + g_psum);
}

}  // namespace u3d::kernels
