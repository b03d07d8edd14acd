// The launchers of the fused normalisation + activation kernels (src/kernels/norm_act.cu): raw
// pointers and a CUDA stream, no torch headers on either side, so nvcc compiles the kernels without
// LibTorch and the library's C++ (src/kernels/fused_norm_act.cpp) owns every tensor. Each returns
// cudaGetLastError() after its launches. The arithmetic is include/u3d/kernels/norm_act_math.h's.
//
// Shapes (NormActShape): x, y, dy, dx are channels-last (N, S, C) in memory, S = D * H * W, of one
// dtype (float32, float16, bfloat16). Statistics units: batch norm one per channel (over N x S),
// group norm one per (n, group) over S x C / groups channels (instance norm: groups = C).
//   partial    (N, chunks, C) per-chunk Moments or GradSums (chunks split S; scratch)
//   channel    (N, C) the same merged over the chunks (scratch)
//   affine     (A, C) ChannelAffine, A = 1 for batch norm, N for group norm
//   coef       (A, C) DxCoefficients
//   weight, bias, running_mean, running_var, dweight, dbias: (C) float32
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_dtype.h"
#include "u3d/kernels/norm_act_math.h"

namespace u3d::kernels::launch {

struct NormActShape {
  int64_t n = 0;       // samples
  int64_t s = 0;       // voxels per sample
  int64_t c = 0;       // channels (<= kMaxChannels)
  int64_t groups = 0;  // group norm: groups (C for instance norm); batch norm: unused
  bool batch = false;  // batch norm: statistics per channel over the whole batch
  int64_t affine_rows() const { return batch ? 1 : n; }
};

// Channels beyond this take ATen (the per-channel tables live in shared memory).
constexpr int64_t kMaxChannels = 1024;

// Forward: moments per chunk, merged per channel, per unit into the affine (batch norm: the running
// statistics updated with `momentum` when running_mean is not null), then y = act(x * scale + shift).
cudaError_t norm_act_forward(const void* x, void* y, DType dtype, const NormActShape& shape, int64_t chunks,
                             const float* weight, const float* bias, float eps, float* running_mean, float* running_var,
                             float momentum, float slope, Moments* partial, Moments* channel, ChannelAffine* affine,
                             cudaStream_t stream);

// Backward: gradient sums per chunk, per channel, per unit into the dx coefficients and the
// parameter gradients, then dx = g * cg + x * cx + c0.
cudaError_t norm_act_backward(const void* dy, const void* x, void* dx, DType dtype, const NormActShape& shape,
                              int64_t chunks, const float* weight, const ChannelAffine* affine, float slope,
                              GradSums* partial, GradSums* channel, DxCoefficients* coef, float* dweight, float* dbias,
                              cudaStream_t stream);

// Threads per block of the chunked reductions along S (the `by` of a (bx, by) block).
int64_t reduction_rows(int64_t channels);

}  // namespace u3d::kernels::launch
