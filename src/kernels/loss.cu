// The fused region-loss kernels (declared in loss_launch.h): one pass over the logits and labels for
// the table of sums forward, one for dx backward. Each block sums its chunk of a sample's voxels in
// registers, then over its threads in a fixed tree (warp shuffles, then the warps in order); a second
// kernel adds the chunks in order. So results are deterministic; nothing allocates and nothing reads
// back to the host, so the launches can be captured in a CUDA graph. A voxel's logits live in
// registers: the kernels are compiled for at most 4, 16 and kMaxLossChannels channels.
#include <math.h>

#include "loss_launch.h"

namespace u3d::kernels::launch {
namespace {

constexpr int kWarps = static_cast<int>(kLossThreads) / 32;
constexpr unsigned kLaneMask = 0xffffffffu;

// The instantiation a launch takes: logits of type T, at most Max channels, the head.
template <typename T, int Max, bool Sigmoid>
struct Variant {
  using Type = T;
  static constexpr int kMax = Max;
  static constexpr bool kSigmoid = Sigmoid;
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kLaneMask, v, offset);
  return v;
}

// A voxel's logits as float32 (channels past c read as 0).
template <typename T, int Max>
__device__ __forceinline__ void load_voxel(const T* __restrict__ x, const LossShape& sh, int c, float (&xs)[Max]) {
#pragma unroll
  for (int k = 0; k < Max; ++k) xs[k] = k < c ? to_float(x[k * sh.channel_stride]) : 0.f;
}

// logsumexp of a voxel's c logits.
template <int Max>
__device__ __forceinline__ float voxel_lse(const float (&xs)[Max], int c) {
  float m = xs[0];
#pragma unroll
  for (int k = 1; k < Max; ++k)
    if (k < c) m = softmax_shift(m, xs[k]);
  float e = 0.f;
#pragma unroll
  for (int k = 0; k < Max; ++k)
    if (k < c) e += expf(xs[k] - m);
  return softmax_lse(m, e);
}

// Per (chunk, sample): the table's sums over the chunk's voxels. Grid (chunks, N), kLossThreads threads.
template <typename T, int Max, bool Sigmoid>
__global__ void __launch_bounds__(kLossThreads)
    loss_sums_kernel(const T* __restrict__ x, const int64_t* __restrict__ labels, LossShape sh, int64_t chunks,
                     float* __restrict__ partial) {
  __shared__ float shared[kWarps][3 * Max + 1];
  const int64_t n = blockIdx.y, chunk = blockIdx.x;
  const int c = static_cast<int>(sh.c);
  const RegionColumns cols{sh.c};
  const int64_t per = (sh.s + chunks - 1) / chunks;
  const int64_t s0 = chunk * per, s1 = s0 + per < sh.s ? s0 + per : sh.s;
  const T* xn = x + n * sh.c * sh.s;
  const int64_t* ln = labels + n * sh.s;
  float inter[Max], psum[Max], ysum[Max], ce = 0.f;
#pragma unroll
  for (int k = 0; k < Max; ++k) inter[k] = psum[k] = ysum[k] = 0.f;
  for (int64_t v = s0 + threadIdx.x; v < s1; v += blockDim.x) {
    const int64_t label = ln[v];
    float xs[Max];
    load_voxel<T, Max>(xn + v * sh.voxel_stride, sh, c, xs);
    // Sigmoid is a compile-time constant: each instantiation keeps one head's arithmetic.
    const float lse = Sigmoid ? 0.f : voxel_lse<Max>(xs, c);
    float x_label = 0.f;
#pragma unroll
    for (int k = 0; k < Max; ++k) {
      if (k >= c) continue;
      const float y = region_target(label, k, Sigmoid);
      const float p = Sigmoid ? sigmoid_prob(xs[k]) : softmax_prob(xs[k], lse);
      inter[k] += p * y;
      psum[k] += p;
      ysum[k] += y;
      if (Sigmoid) ce += sigmoid_bce(xs[k], y);
      if (y != 0.f) x_label = xs[k];
    }
    if (!Sigmoid) ce += softmax_ce(lse, x_label, /*label_valid=*/label >= 0 && label < c);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int k = 0; k < Max; ++k) {
    if (k >= c) continue;
    const float a = warp_sum(inter[k]), b = warp_sum(psum[k]), d = warp_sum(ysum[k]);
    if (lane == 0) {
      shared[warp][cols.inter(k)] = a;
      shared[warp][cols.psum(k)] = b;
      shared[warp][cols.ysum(k)] = d;
    }
  }
  const float ce_warp = warp_sum(ce);
  if (lane == 0) shared[warp][cols.ce()] = ce_warp;
  __syncthreads();
  const int64_t width = cols.width();
  for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += shared[w][j];
    partial[(n * chunks + chunk) * width + j] = sum;
  }
}

// Per (sample, column): the chunks' sums in chunk order.
__global__ void loss_merge_chunks_kernel(const float* __restrict__ partial, int64_t n, int64_t width, int64_t chunks,
                                         float* __restrict__ table) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t sample = i / width, j = i % width;
  float sum = 0.f;
  for (int64_t k = 0; k < chunks; ++k) sum += partial[(sample * chunks + k) * width + j];
  table[i] = sum;
}

// dx of every logit of sample blockIdx.y, the sample's row of `grad` in shared memory.
template <typename T, int Max, bool Sigmoid>
__global__ void __launch_bounds__(kLossThreads)
    loss_dx_kernel(const T* __restrict__ x, const int64_t* __restrict__ labels, LossShape sh,
                   const float* __restrict__ grad, T* __restrict__ dx) {
  __shared__ float g[3 * Max + 1];
  const int64_t n = blockIdx.y;
  const int c = static_cast<int>(sh.c);
  const RegionColumns cols{sh.c};
  for (int64_t j = threadIdx.x; j < cols.width(); j += blockDim.x) g[j] = grad[n * cols.width() + j];
  __syncthreads();
  const float g_ce = g[cols.ce()];
  const int64_t base = n * sh.c * sh.s;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < sh.s; v += step) {
    const int64_t label = labels[n * sh.s + v], at = base + v * sh.voxel_stride;
    float xs[Max];
    load_voxel<T, Max>(x + at, sh, c, xs);
    if constexpr (Sigmoid) {
#pragma unroll
      for (int k = 0; k < Max; ++k) {
        if (k >= c) continue;
        const float y = region_target(label, k, /*sigmoid=*/true);
        const float d = sigmoid_dx(sigmoid_prob(xs[k]), y, g[cols.inter(k)], g[cols.psum(k)], g_ce);
        dx[at + k * sh.channel_stride] = from_float<T>(d);
      }
    } else {
      const float lse = voxel_lse<Max>(xs, c);
      float pa = 0.f;
#pragma unroll
      for (int k = 0; k < Max; ++k) {
        if (k >= c) continue;
        xs[k] = softmax_prob(xs[k], lse);  // xs holds p from here on
        pa +=
            xs[k] * softmax_grad_weight(region_target(label, k, /*sigmoid=*/false), g[cols.inter(k)], g[cols.psum(k)]);
      }
#pragma unroll
      for (int k = 0; k < Max; ++k) {
        if (k >= c) continue;
        const float y = region_target(label, k, /*sigmoid=*/false);
        const float a = softmax_grad_weight(y, g[cols.inter(k)], g[cols.psum(k)]);
        dx[at + k * sh.channel_stride] = from_float<T>(softmax_dx(xs[k], y, a, pa, g_ce));
      }
    }
  }
}

template <typename T, bool Sigmoid, typename Fn>
void by_channels(int64_t c, Fn&& fn) {
  if (c <= 4) {
    fn(Variant<T, 4, Sigmoid>{});
  } else if (c <= 16) {
    fn(Variant<T, 16, Sigmoid>{});
  } else if (c <= 32) {  // 17 to 32 channels: 156 to 176 registers on sm_90 and no spill (64-wide: 255, spills)
    fn(Variant<T, 32, Sigmoid>{});
  } else {
    fn(Variant<T, static_cast<int>(kMaxLossChannels), Sigmoid>{});
  }
}

template <typename T, typename Fn>
void by_head(const LossShape& sh, Fn&& fn) {
  if (sh.sigmoid) {
    by_channels<T, true>(sh.c, fn);
  } else {
    by_channels<T, false>(sh.c, fn);
  }
}

// fn(Variant<T, Max, Sigmoid>{}) for the launch's dtype, channels and head.
template <typename Fn>
void dispatch(DType dtype, const LossShape& sh, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat: by_head<float>(sh, fn); break;
    case DType::kHalf: by_head<__half>(sh, fn); break;
    case DType::kBFloat16: by_head<__nv_bfloat16>(sh, fn); break;
  }
}

unsigned blocks_for(int64_t threads, int64_t per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace

cudaError_t region_loss_forward(const void* logits, const int64_t* labels, DType dtype, const LossShape& shape,
                                int64_t chunks, float* partial, float* table, cudaStream_t stream) {
  dispatch(dtype, shape, [&](auto variant) {
    using V = decltype(variant);
    using T = typename V::Type;
    loss_sums_kernel<T, V::kMax, V::kSigmoid>
        <<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(shape.n)), kLossThreads, 0, stream>>>(
            static_cast<const T*>(logits), labels, shape, chunks, partial);
  });
  const int64_t width = RegionColumns{shape.c}.width();
  loss_merge_chunks_kernel<<<blocks_for(shape.n * width, 128), 128, 0, stream>>>(partial, shape.n, width, chunks,
                                                                                 table);
  return cudaGetLastError();
}

cudaError_t region_loss_backward(const void* logits, const int64_t* labels, DType dtype, const LossShape& shape,
                                 const float* grad, void* dx, cudaStream_t stream) {
  int64_t blocks = (2048 + shape.n - 1) / shape.n;  // about 16 blocks per SM of a 132-SM GPU over the batch
  const int64_t work = (shape.s + kLossThreads - 1) / kLossThreads;
  if (blocks > work) blocks = work;
  if (blocks < 1) blocks = 1;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(shape.n));
  dispatch(dtype, shape, [&](auto variant) {
    using V = decltype(variant);
    using T = typename V::Type;
    loss_dx_kernel<T, V::kMax, V::kSigmoid>
        <<<grid, kLossThreads, 0, stream>>>(static_cast<const T*>(logits), labels, shape, grad, static_cast<T*>(dx));
  });
  return cudaGetLastError();
}

}  // namespace u3d::kernels::launch
