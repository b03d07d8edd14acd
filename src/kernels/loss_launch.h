// The launchers of the fused region-loss kernels (src/kernels/loss.cu): raw pointers and a CUDA
// stream, no torch headers on either side (as norm_act_launch.h); the room's .cpp
// (src/kernels/fused_loss.cpp) owns every tensor. Each returns cudaGetLastError() after its launches.
// The per-voxel arithmetic is include/u3d/kernels/loss_math.h's.
//
// Shapes (LossShape): logits (N, C, S) addressed as n * C * S + v * voxel_stride + c * channel_stride,
// S = D * H * W (channels-last: voxel_stride C, channel_stride 1; contiguous NCDHW: 1 and S), of one
// dtype (float32, float16, bfloat16); labels (N, S) int64, contiguous.
//   partial  (N, chunks, W) float32, each chunk's sums (scratch), W = RegionColumns::width()
//   table    (N, W) float32, the chunks' sums in chunk order (loss_math.h's columns)
//   grad     (N, W) float32, the gradient of the table (the ysum columns are not read)
//   dx       the logits' shape, dtype and layout
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_dtype.h"
#include "u3d/kernels/loss_math.h"

namespace u3d::kernels::launch {

struct LossShape {
  int64_t n = 0;               // samples
  int64_t s = 0;               // voxels per sample
  int64_t c = 0;               // channels of the logits (<= kMaxLossChannels): softmax K, sigmoid K - 1
  int64_t voxel_stride = 0;    // elements between a voxel's logits and the next voxel's
  int64_t channel_stride = 0;  // elements between a voxel's neighbouring channels
  bool sigmoid = false;        // the sigmoid head (per-channel BCE); else softmax cross-entropy
};

// Threads of a block of the loss kernels.
constexpr int64_t kLossThreads = 256;

// Chunks of S per sample: about four blocks per SM over the batch, each at least a block's voxels.
inline int64_t loss_chunks(int64_t n, int64_t s, int64_t sms) {
  const int64_t most = s / kLossThreads > 1 ? s / kLossThreads : 1;
  const int64_t want = (4 * sms + n - 1) / n;
  return want < 1 ? 1 : (want > most ? most : want);
}

// Forward: per (sample, chunk) the table's sums over the chunk's voxels, then per sample in chunk order.
cudaError_t region_loss_forward(const void* logits, const int64_t* labels, DType dtype, const LossShape& shape,
                                int64_t chunks, float* partial, float* table, cudaStream_t stream);

// Backward: dx of every logit from the voxel's logits and label and the sample's row of `grad`.
cudaError_t region_loss_backward(const void* logits, const int64_t* labels, DType dtype, const LossShape& shape,
                                 const float* grad, void* dx, cudaStream_t stream);

}  // namespace u3d::kernels::launch
