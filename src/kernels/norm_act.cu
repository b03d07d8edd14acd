// The fused normalisation + activation kernels (declared in norm_act_launch.h). Every reduction is
// two-stage with a fixed order (per-chunk partials, then a fixed tree per channel and a fixed loop
// per unit), so results are deterministic; nothing allocates and nothing reads back to the host, so
// the launches can be captured in a CUDA graph.
#include "norm_act_launch.h"

namespace u3d::kernels::launch {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) { return moments_merge(a, b); }
__device__ __forceinline__ GradSums merge(const GradSums& a, const GradSums& b) { return grad_sums_merge(a, b); }

__device__ __forceinline__ Moments shuffle_down(const Moments& m, int offset) {
  return {__shfl_down_sync(kFullMask, m.count, offset), __shfl_down_sync(kFullMask, m.mean, offset),
          __shfl_down_sync(kFullMask, m.m2, offset)};
}
__device__ __forceinline__ GradSums shuffle_down(const GradSums& s, int offset) {
  return {__shfl_down_sync(kFullMask, s.g, offset), __shfl_down_sync(kFullMask, s.gxc, offset)};
}

// Block shape of the reductions along S: bx channels (a power of two up to 32) by `by` voxel rows.
__host__ __device__ int64_t block_channels(int64_t c) {
  int64_t bx = 1;
  while (bx < c && bx < 32) bx *= 2;
  return bx;
}

// Per (n, chunk, channel): what `Acc` accumulates over the chunk's voxels. Grid (chunks, N), block
// (bx, by); shared memory bx * by accumulators, merged over the rows in a fixed tree.
template <typename T, typename Acc, typename AddFn>
__device__ void reduce_chunk(int64_t s, int64_t c, int64_t chunks, Acc* partial, AddFn add) {
  extern __shared__ unsigned char shared_raw[];
  Acc* shared = reinterpret_cast<Acc*>(shared_raw);
  const int64_t n = blockIdx.y, chunk = blockIdx.x;
  const int64_t per = (s + chunks - 1) / chunks;
  const int64_t s0 = chunk * per, s1 = s0 + per < s ? s0 + per : s;
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  for (int64_t c0 = 0; c0 < c; c0 += bx) {
    const int64_t ch = c0 + tx;
    Acc acc;
    if (ch < c) {
      for (int64_t v = s0 + ty; v < s1; v += by) add(acc, (n * s + v) * c + ch, n, ch);
    }
    shared[ty * bx + tx] = acc;
    __syncthreads();
    for (int stride = by / 2; stride > 0; stride /= 2) {
      if (ty < stride) shared[ty * bx + tx] = merge(shared[ty * bx + tx], shared[(ty + stride) * bx + tx]);
      __syncthreads();
    }
    if (ty == 0 && ch < c) partial[(n * chunks + chunk) * c + ch] = shared[tx];
    __syncthreads();
  }
}

template <typename T>
__global__ void norm_act_moments_kernel(const T* __restrict__ x, int64_t s, int64_t c, int64_t chunks,
                                        Moments* __restrict__ partial) {
  reduce_chunk<T, Moments>(s, c, chunks, partial,
                           [&](Moments& m, int64_t i, int64_t, int64_t) { moments_add(m, to_float(x[i])); });
}

template <typename T>
__global__ void norm_act_grad_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t s, int64_t c,
                                          int64_t chunks, const ChannelAffine* __restrict__ affine,
                                          int64_t affine_stride, float slope, GradSums* __restrict__ partial) {
  reduce_chunk<T, GradSums>(s, c, chunks, partial, [&](GradSums& acc, int64_t i, int64_t n, int64_t ch) {
    grad_sums_add(acc, to_float(dy[i]), to_float(x[i]), affine[n * affine_stride + ch], slope);
  });
}

// Per (n, c): the chunks' partials merged, one warp each (lanes stride the chunks, then a fixed
// shuffle tree).
template <typename Acc>
__global__ void norm_act_merge_chunks_kernel(const Acc* __restrict__ partial, int64_t n_c, int64_t c, int64_t chunks,
                                             Acc* __restrict__ channel) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= n_c) return;  // the whole warp leaves together
  const int64_t n = warp / c, ch = warp % c;
  Acc acc;
  for (int64_t k = lane; k < chunks; k += 32) acc = merge(acc, partial[(n * chunks + k) * c + ch]);
  for (int offset = 16; offset > 0; offset /= 2) acc = merge(acc, shuffle_down(acc, offset));
  if (lane == 0) channel[warp] = acc;
}

// A group-norm unit (sample n, channels first .. first + count - 1) of thread `unit`, or count 0 past the end.
struct GroupUnit {
  int64_t n = 0, first = 0, count = 0;
};
__device__ GroupUnit group_unit(const NormActShape& shape, int64_t unit) {
  if (unit >= shape.n * shape.groups) return {};
  const int64_t cg = shape.c / shape.groups;
  return {unit / shape.groups, (unit % shape.groups) * cg, cg};
}

// Batch norm's unit `ch`: the samples' per-channel accumulators merged in sample order.
template <typename Acc>
__device__ Acc merge_over_batch(const Acc* __restrict__ channel, const NormActShape& shape, int64_t ch) {
  Acc acc;
  for (int64_t n = 0; n < shape.n; ++n) acc = merge(acc, channel[n * shape.c + ch]);
  return acc;
}

// Per unit: the affine of its channels (and batch norm's running statistics).
__global__ void norm_act_affine_kernel(const Moments* __restrict__ channel, NormActShape shape,
                                       const float* __restrict__ weight, const float* __restrict__ bias, float eps,
                                       float* running_mean, float* running_var, float momentum,
                                       ChannelAffine* __restrict__ affine) {
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t c = shape.c;
  if (shape.batch) {
    if (unit >= c) return;
    const Moments m = merge_over_batch(channel, shape, unit);
    affine[unit] = channel_affine(m, eps, weight[unit], bias[unit]);
    if (running_mean != nullptr) {
      running_mean[unit] = (1.f - momentum) * running_mean[unit] + momentum * m.mean;
      running_var[unit] = (1.f - momentum) * running_var[unit] + momentum * unbiased_var(m);
    }
    return;
  }
  const GroupUnit g = group_unit(shape, unit);
  Moments m;
  for (int64_t k = 0; k < g.count; ++k) m = moments_merge(m, channel[g.n * c + g.first + k]);
  for (int64_t ch = g.first; ch < g.first + g.count; ++ch) {
    affine[g.n * c + ch] = channel_affine(m, eps, weight[ch], bias[ch]);
  }
}

// Per unit: the dx coefficients; batch norm also the parameter gradients.
__global__ void norm_act_coefficients_kernel(const GradSums* __restrict__ channel, NormActShape shape,
                                             const float* __restrict__ weight, const ChannelAffine* __restrict__ affine,
                                             DxCoefficients* __restrict__ coef, float* dweight, float* dbias) {
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t c = shape.c;
  if (shape.batch) {
    if (unit >= c) return;
    const GradSums sums = merge_over_batch(channel, shape, unit);
    const ChannelAffine aff = affine[unit];
    const float count = static_cast<float>(shape.n) * static_cast<float>(shape.s);
    const float w = weight[unit], sum_gxhat = aff.rstd * sums.gxc;
    coef[unit] = dx_coefficients(aff, w, w * sums.g / count, w * sum_gxhat / count);
    dweight[unit] = sum_gxhat;
    dbias[unit] = sums.g;
    return;
  }
  const GroupUnit g = group_unit(shape, unit);
  float a = 0.f, b = 0.f;
  for (int64_t ch = g.first; ch < g.first + g.count; ++ch) {
    a += weight[ch] * channel[g.n * c + ch].g;
    b += weight[ch] * affine[g.n * c + ch].rstd * channel[g.n * c + ch].gxc;
  }
  const float count = static_cast<float>(shape.s) * static_cast<float>(g.count);
  for (int64_t ch = g.first; ch < g.first + g.count; ++ch) {
    coef[g.n * c + ch] = dx_coefficients(affine[g.n * c + ch], weight[ch], a / count, b / count);
  }
}

// Group norm's parameter gradients: per channel, the samples' sums in a fixed order.
__global__ void norm_act_group_param_grads_kernel(const GradSums* __restrict__ channel, NormActShape shape,
                                                  const ChannelAffine* __restrict__ affine, float* dweight,
                                                  float* dbias) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= shape.c) return;
  float dw = 0.f, db = 0.f;
  for (int64_t n = 0; n < shape.n; ++n) {
    const int64_t i = n * shape.c + ch;
    dw += affine[i].rstd * channel[i].gxc;
    db += channel[i].g;
  }
  dweight[ch] = dw;
  dbias[ch] = db;
}

// V values of T, loaded and stored as one access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Element-wise over sample blockIdx.y with the sample's per-channel tables in shared memory:
// y = act(x * scale + shift). V values per access (C % V == 0, so they share a row).
template <typename T, int V>
__global__ void norm_act_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t s, int64_t c,
                                      const ChannelAffine* __restrict__ affine, int64_t affine_stride, float slope) {
  extern __shared__ unsigned char shared_raw[];
  ChannelAffine* table = reinterpret_cast<ChannelAffine*>(shared_raw);
  const int64_t n = blockIdx.y;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) table[k] = affine[n * affine_stride + k];
  __syncthreads();
  const int64_t count = s * c, base = n * count;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < count; i += step) {
    const int64_t ch = i % c;
    Pack<T, V> in = *reinterpret_cast<const Pack<T, V>*>(x + base + i), out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const ChannelAffine& a = table[ch + k];
      out.v[k] = from_float<T>(activate(to_float(in.v[k]) * a.scale + a.shift, slope));
    }
    *reinterpret_cast<Pack<T, V>*>(y + base + i) = out;
  }
}

// dx = g * cg + x * cx + c0, g recomputed from x (shared tables of affine and coefficients).
template <typename T, int V>
__global__ void norm_act_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, int64_t s,
                                   int64_t c, const ChannelAffine* __restrict__ affine,
                                   const DxCoefficients* __restrict__ coef, int64_t affine_stride, float slope) {
  extern __shared__ unsigned char shared_raw[];
  ChannelAffine* table = reinterpret_cast<ChannelAffine*>(shared_raw);
  DxCoefficients* coefs = reinterpret_cast<DxCoefficients*>(table + c);
  const int64_t n = blockIdx.y;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
    table[k] = affine[n * affine_stride + k];
    coefs[k] = coef[n * affine_stride + k];
  }
  __syncthreads();
  const int64_t count = s * c, base = n * count;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V; i < count; i += step) {
    const int64_t ch = i % c;
    Pack<T, V> g = *reinterpret_cast<const Pack<T, V>*>(dy + base + i);
    Pack<T, V> in = *reinterpret_cast<const Pack<T, V>*>(x + base + i), out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      out.v[k] = from_float<T>(dx_value(to_float(g.v[k]), to_float(in.v[k]), table[ch + k], coefs[ch + k], slope));
    }
    *reinterpret_cast<Pack<T, V>*>(dx + base + i) = out;
  }
}

// Blocks of an element-wise pass over one sample: enough to fill the GPU, no more than the work.
dim3 elementwise_grid(int64_t n, int64_t per_sample, int v) {
  const int64_t work = (per_sample / v + kThreads - 1) / kThreads;
  int64_t blocks = (2048 + n - 1) / n;  // about 16 blocks per SM of a 132-SM GPU over the batch
  if (blocks > work) blocks = work;
  if (blocks < 1) blocks = 1;
  return dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n));
}

// The widest access (16 bytes) that C and the pointers allow.
template <typename T>
int vector_width(int64_t c, const void* a, const void* b, const void* d) {
  const auto aligned = [](const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2) {
    const int bytes = v * static_cast<int>(sizeof(T));
    if (c % v == 0 && aligned(a, bytes) && aligned(b, bytes) && (d == nullptr || aligned(d, bytes))) return v;
  }
  return 1;
}

template <typename T>
void apply(const T* x, T* y, const NormActShape& sh, const ChannelAffine* affine, float slope, cudaStream_t stream) {
  const int64_t stride = sh.batch ? 0 : sh.c;
  const size_t smem = sizeof(ChannelAffine) * sh.c;
  const int v = vector_width<T>(sh.c, x, y, nullptr);
  const dim3 grid = elementwise_grid(sh.n, sh.s * sh.c, v);
  switch (v) {
    case 8:
      norm_act_apply_kernel<T, 8><<<grid, kThreads, smem, stream>>>(x, y, sh.s, sh.c, affine, stride, slope);
      break;
    case 4:
      norm_act_apply_kernel<T, 4><<<grid, kThreads, smem, stream>>>(x, y, sh.s, sh.c, affine, stride, slope);
      break;
    case 2:
      norm_act_apply_kernel<T, 2><<<grid, kThreads, smem, stream>>>(x, y, sh.s, sh.c, affine, stride, slope);
      break;
    default:
      norm_act_apply_kernel<T, 1><<<grid, kThreads, smem, stream>>>(x, y, sh.s, sh.c, affine, stride, slope);
      break;
  }
}

template <typename T>
void dx_pass(const T* dy, const T* x, T* dx, const NormActShape& sh, const ChannelAffine* affine,
             const DxCoefficients* coef, float slope, cudaStream_t stream) {
  const int64_t stride = sh.batch ? 0 : sh.c;
  const size_t smem = (sizeof(ChannelAffine) + sizeof(DxCoefficients)) * sh.c;
  const int v = vector_width<T>(sh.c, dy, x, dx);
  const dim3 grid = elementwise_grid(sh.n, sh.s * sh.c, v);
  switch (v) {
    case 8:
      norm_act_dx_kernel<T, 8><<<grid, kThreads, smem, stream>>>(dy, x, dx, sh.s, sh.c, affine, coef, stride, slope);
      break;
    case 4:
      norm_act_dx_kernel<T, 4><<<grid, kThreads, smem, stream>>>(dy, x, dx, sh.s, sh.c, affine, coef, stride, slope);
      break;
    case 2:
      norm_act_dx_kernel<T, 2><<<grid, kThreads, smem, stream>>>(dy, x, dx, sh.s, sh.c, affine, coef, stride, slope);
      break;
    default:
      norm_act_dx_kernel<T, 1><<<grid, kThreads, smem, stream>>>(dy, x, dx, sh.s, sh.c, affine, coef, stride, slope);
      break;
  }
}

dim3 reduction_block(int64_t c) {
  const int64_t bx = block_channels(c);
  return dim3(static_cast<unsigned>(bx), static_cast<unsigned>(kThreads / bx));
}

unsigned blocks_for(int64_t threads, int64_t per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

template <typename T>
void forward_typed(const void* xv, void* yv, const NormActShape& sh, int64_t chunks, const float* weight,
                   const float* bias, float eps, float* running_mean, float* running_var, float momentum, float slope,
                   Moments* partial, Moments* channel, ChannelAffine* affine, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xv);
  const dim3 block = reduction_block(sh.c);
  norm_act_moments_kernel<T><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(sh.n)), block,
                               sizeof(Moments) * block.x * block.y, stream>>>(x, sh.s, sh.c, chunks, partial);
  norm_act_merge_chunks_kernel<Moments>
      <<<blocks_for(sh.n * sh.c * 32, kThreads), kThreads, 0, stream>>>(partial, sh.n * sh.c, sh.c, chunks, channel);
  const int64_t units = sh.batch ? sh.c : sh.n * sh.groups;
  norm_act_affine_kernel<<<blocks_for(units, 128), 128, 0, stream>>>(channel, sh, weight, bias, eps, running_mean,
                                                                     running_var, momentum, affine);
  apply<T>(x, static_cast<T*>(yv), sh, affine, slope, stream);
}

template <typename T>
void backward_typed(const void* dyv, const void* xv, void* dxv, const NormActShape& sh, int64_t chunks,
                    const float* weight, const ChannelAffine* affine, float slope, GradSums* partial, GradSums* channel,
                    DxCoefficients* coef, float* dweight, float* dbias, cudaStream_t stream) {
  const T* dy = static_cast<const T*>(dyv);
  const T* x = static_cast<const T*>(xv);
  const dim3 block = reduction_block(sh.c);
  const int64_t stride = sh.batch ? 0 : sh.c;
  norm_act_grad_sums_kernel<T>
      <<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(sh.n)), block, sizeof(GradSums) * block.x * block.y,
         stream>>>(dy, x, sh.s, sh.c, chunks, affine, stride, slope, partial);
  norm_act_merge_chunks_kernel<GradSums>
      <<<blocks_for(sh.n * sh.c * 32, kThreads), kThreads, 0, stream>>>(partial, sh.n * sh.c, sh.c, chunks, channel);
  const int64_t units = sh.batch ? sh.c : sh.n * sh.groups;
  norm_act_coefficients_kernel<<<blocks_for(units, 128), 128, 0, stream>>>(channel, sh, weight, affine, coef, dweight,
                                                                           dbias);
  if (!sh.batch) {
    norm_act_group_param_grads_kernel<<<blocks_for(sh.c, 128), 128, 0, stream>>>(channel, sh, affine, dweight, dbias);
  }
  dx_pass<T>(dy, x, static_cast<T*>(dxv), sh, affine, coef, slope, stream);
}

}  // namespace

int64_t reduction_rows(int64_t channels) { return kThreads / block_channels(channels); }

cudaError_t norm_act_forward(const void* x, void* y, DType dtype, const NormActShape& shape, int64_t chunks,
                             const float* weight, const float* bias, float eps, float* running_mean, float* running_var,
                             float momentum, float slope, Moments* partial, Moments* channel, ChannelAffine* affine,
                             cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      forward_typed<float>(x, y, shape, chunks, weight, bias, eps, running_mean, running_var, momentum, slope, partial,
                           channel, affine, stream);
      break;
    case DType::kHalf:
      forward_typed<__half>(x, y, shape, chunks, weight, bias, eps, running_mean, running_var, momentum, slope, partial,
                            channel, affine, stream);
      break;
    case DType::kBFloat16:
      forward_typed<__nv_bfloat16>(x, y, shape, chunks, weight, bias, eps, running_mean, running_var, momentum, slope,
                                   partial, channel, affine, stream);
      break;
  }
  return cudaGetLastError();
}

cudaError_t norm_act_backward(const void* dy, const void* x, void* dx, DType dtype, const NormActShape& shape,
                              int64_t chunks, const float* weight, const ChannelAffine* affine, float slope,
                              GradSums* partial, GradSums* channel, DxCoefficients* coef, float* dweight, float* dbias,
                              cudaStream_t stream) {
  switch (dtype) {
    case DType::kFloat:
      backward_typed<float>(dy, x, dx, shape, chunks, weight, affine, slope, partial, channel, coef, dweight, dbias,
                            stream);
      break;
    case DType::kHalf:
      backward_typed<__half>(dy, x, dx, shape, chunks, weight, affine, slope, partial, channel, coef, dweight, dbias,
                             stream);
      break;
    case DType::kBFloat16:
      backward_typed<__nv_bfloat16>(dy, x, dx, shape, chunks, weight, affine, slope, partial, channel, coef, dweight,
                                    dbias, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace u3d::kernels::launch
