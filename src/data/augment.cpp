#include "u3d/data/augment.h"

#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "dtype_dispatch.h"
#include "u3d/core/errors.h"

namespace u3d {
namespace {

// ---------------------------------------------------------------------------------------------
// out[x] = last[-x] for x in [0, n): a mirrored row. One- and two-byte elements are reversed 8 bytes
// at a time (byte swap, lane swap), 2.5 times faster for uint8 than the element loop GCC makes.
template <typename T>
void reverse_row(const T* last, T* out, int64_t n) {
  int64_t x = 0;
  if constexpr (sizeof(T) <= 2) {
    constexpr int64_t lanes = static_cast<int64_t>(8 / sizeof(T));
    for (; x + lanes <= n; x += lanes) {
      uint64_t w;
      std::memcpy(&w, last - x - lanes + 1, 8);
      if constexpr (sizeof(T) == 1) {
        w = __builtin_bswap64(w);
      } else {
        w = (w >> 32) | (w << 32);
        w = ((w & 0xFFFF0000FFFF0000ull) >> 16) | ((w & 0x0000FFFF0000FFFFull) << 16);
      }
      std::memcpy(out + x, &w, 8);
    }
  }
  for (; x < n; ++x) out[x] = last[-x];
}

// Exact strided copy for a signed-permutation transform: output axis j reads source axis a(j) in
// direction s(j); converts T to Out (exactly: Out is T or float32).
template <typename T, typename Out>
void permute_copy(const T* src, const Shape3& dims, int64_t channels, int64_t channel_stride, const PatchTransform& t,
                  Out* dst) {
  const std::array<int64_t, 3> stride = {dims[1] * dims[2], dims[2], 1};
  std::array<int64_t, 3> step{};
  int64_t start = 0;
  for (int j = 0; j < 3; ++j) {
    for (int a = 0; a < 3; ++a) {
      const double m = t.matrix[static_cast<size_t>(a * 3 + j)];
      if (m == 0) continue;
      const int64_t s = m > 0 ? 1 : -1;
      step[static_cast<size_t>(j)] = s * stride[static_cast<size_t>(a)];
      start += (s > 0 ? t.origin[static_cast<size_t>(a)]
                      : t.origin[static_cast<size_t>(a)] + t.patch[static_cast<size_t>(j)] - 1) *
               stride[static_cast<size_t>(a)];
    }
  }
  const int64_t p0 = t.patch[0], p1 = t.patch[1], p2 = t.patch[2];
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i0 = 0; i0 < p0; ++i0) {
      for (int64_t i1 = 0; i1 < p1; ++i1) {
        const T* row = src + c * channel_stride + start + i0 * step[0] + i1 * step[1];
        Out* out = dst + ((c * p0 + i0) * p1 + i1) * p2;
        if constexpr (std::is_same_v<T, Out>) {
          if (step[2] == 1) {
            std::memcpy(out, row, static_cast<size_t>(p2) * sizeof(T));
            continue;
          }
          if (step[2] == -1) {
            reverse_row(row, out, p2);
            continue;
          }
        }
        if (step[2] == 1) {
          for (int64_t x = 0; x < p2; ++x) out[x] = static_cast<Out>(row[x]);
        } else if (step[2] == -1) {
          for (int64_t x = 0; x < p2; ++x) out[x] = static_cast<Out>(row[-x]);
        } else {
          const int64_t s2 = step[2];
          for (int64_t x = 0; x < p2; ++x) out[x] = static_cast<Out>(row[x * s2]);
        }
      }
    }
  }
}

// Source coordinates of every patch voxel, walked in output order: calls fn(q0, q1, q2) per voxel.
// Summed as the DeviceSampler does: centre + m0 u0 + m1 u1 + m2 u2, then the displacement.
template <typename F>
void for_each_source(const PatchTransform& t, F&& fn) {
  if (t.displacement.defined()) {
    TORCH_CHECK(t.displacement.scalar_type() == torch::kFloat && t.displacement.is_contiguous() &&
                    t.displacement.sizes() == torch::IntArrayRef({3, t.patch[0], t.patch[1], t.patch[2]}),
                "resample_patch: the displacement must be (3, d, h, w) float32 contiguous");
  }
  const float* disp = t.displacement.defined() ? t.displacement.data_ptr<float>() : nullptr;
  const int64_t out_volume = t.patch[0] * t.patch[1] * t.patch[2];
  int64_t o = 0;
  const auto& m = t.matrix;
  std::array<double, 3> pc{}, centre{};
  for (int a = 0; a < 3; ++a) {
    pc[static_cast<size_t>(a)] = (static_cast<double>(t.patch[static_cast<size_t>(a)]) - 1.0) / 2.0;
    centre[static_cast<size_t>(a)] = static_cast<double>(t.origin[static_cast<size_t>(a)]) + pc[static_cast<size_t>(a)];
  }
  for (int64_t i0 = 0; i0 < t.patch[0]; ++i0) {
    for (int64_t i1 = 0; i1 < t.patch[1]; ++i1) {
      for (int64_t i2 = 0; i2 < t.patch[2]; ++i2) {
        const double u0 = static_cast<double>(i0) - pc[0], u1 = static_cast<double>(i1) - pc[1],
                     u2 = static_cast<double>(i2) - pc[2];
        double q0 = centre[0] + m[0] * u0 + m[1] * u1 + m[2] * u2, q1 = centre[1] + m[3] * u0 + m[4] * u1 + m[5] * u2,
               q2 = centre[2] + m[6] * u0 + m[7] * u1 + m[8] * u2;
        if (disp) {
          q0 += static_cast<double>(disp[o]);
          q1 += static_cast<double>(disp[out_volume + o]);
          q2 += static_cast<double>(disp[2 * out_volume + o]);
        }
        ++o;
        fn(q0, q1, q2);
      }
    }
  }
}

// Trilinear resampling in blocks of output voxels: the block's corner indices and weights are
// computed once, then each channel is interpolated over the block (channel-planar data stays in
// cache).
template <typename T>
void resample_linear(const T* src, const Shape3& dims, int64_t channels, int64_t channel_stride,
                     const PatchTransform& t, const float* pad, float* dst) {
  const int64_t out_volume = t.patch[0] * t.patch[1] * t.patch[2];
  const int64_t hw = dims[1] * dims[2];
  const int64_t tap[8] = {0, 1, dims[2], dims[2] + 1, hw, hw + 1, hw + dims[2], hw + dims[2] + 1};
  constexpr int64_t kBlock = 2048;
  std::vector<int64_t> base(kBlock);  // lower corner index; -1: some tap outside the volume
  std::vector<float> weight(kBlock * 8);
  std::vector<int64_t> index(kBlock * 8);  // border voxels: every tap's index, -1 outside
  int64_t o = 0, filled = 0;
  auto flush = [&] {
    for (int64_t c = 0; c < channels; ++c) {
      const T* s = src + c * channel_stride;
      const float p = pad ? pad[c] : 0.0f;
      float* out = dst + c * out_volume + o;
      for (int64_t i = 0; i < filled; ++i) {
        const float* w = &weight[static_cast<size_t>(i * 8)];
        float v = 0;
        if (base[static_cast<size_t>(i)] >= 0) {
          const T* b = s + base[static_cast<size_t>(i)];
          for (int k = 0; k < 8; ++k) v += w[k] * static_cast<float>(b[tap[k]]);
        } else {
          const int64_t* at = &index[static_cast<size_t>(i * 8)];
          for (int k = 0; k < 8; ++k) v += w[k] * (at[k] >= 0 ? static_cast<float>(s[at[k]]) : p);
        }
        out[i] = v;
      }
    }
    o += filled;
    filled = 0;
  };
  for_each_source(t, [&](double q0, double q1, double q2) {
    const double f0 = std::floor(q0), f1 = std::floor(q1), f2 = std::floor(q2);
    const int64_t z = static_cast<int64_t>(f0), y = static_cast<int64_t>(f1), x = static_cast<int64_t>(f2);
    const float w0 = static_cast<float>(q0 - f0), w1 = static_cast<float>(q1 - f1), w2 = static_cast<float>(q2 - f2);
    float* w = &weight[static_cast<size_t>(filled * 8)];
    for (int k = 0; k < 8; ++k) {
      w[k] = ((k >> 2) ? w0 : 1.0f - w0) * (((k >> 1) & 1) ? w1 : 1.0f - w1) * ((k & 1) ? w2 : 1.0f - w2);
    }
    if (z >= 0 && z + 1 < dims[0] && y >= 0 && y + 1 < dims[1] && x >= 0 && x + 1 < dims[2]) {
      base[static_cast<size_t>(filled)] = (z * dims[1] + y) * dims[2] + x;
    } else {
      base[static_cast<size_t>(filled)] = -1;
      for (int k = 0; k < 8; ++k) {
        const int64_t zz = z + (k >> 2), yy = y + ((k >> 1) & 1), xx = x + (k & 1);
        const bool inside = zz >= 0 && zz < dims[0] && yy >= 0 && yy < dims[1] && xx >= 0 && xx < dims[2];
        index[static_cast<size_t>(filled * 8 + k)] = inside ? (zz * dims[1] + yy) * dims[2] + xx : -1;
      }
    }
    if (++filled == kBlock) flush();
  });
  flush();
}

template <typename T>
void resample_nearest(const T* src, const Shape3& dims, int64_t channels, int64_t channel_stride,
                      const PatchTransform& t, const float* pad, T* dst) {
  const int64_t out_volume = t.patch[0] * t.patch[1] * t.patch[2];
  int64_t o = 0;
  for_each_source(t, [&](double q0, double q1, double q2) {
    const int64_t z = static_cast<int64_t>(std::floor(q0 + 0.5)), y = static_cast<int64_t>(std::floor(q1 + 0.5)),
                  x = static_cast<int64_t>(std::floor(q2 + 0.5));
    const bool inside = z >= 0 && z < dims[0] && y >= 0 && y < dims[1] && x >= 0 && x < dims[2];
    const int64_t index = (z * dims[1] + y) * dims[2] + x;
    for (int64_t c = 0; c < channels; ++c) {
      dst[c * out_volume + o] = inside ? src[c * channel_stride + index] : static_cast<T>(pad ? pad[c] : 0.0f);
    }
    ++o;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
Matrix3 matmul(const Matrix3& a, const Matrix3& b) {
  Matrix3 c{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += a[static_cast<size_t>(i * 3 + k)] * b[static_cast<size_t>(k * 3 + j)];
      c[static_cast<size_t>(i * 3 + j)] = s;
    }
  }
  return c;
}

Matrix3 flip_matrix(const std::array<bool, 3>& axes) {
  Matrix3 m = kIdentity3;
  for (int a = 0; a < 3; ++a) {
    if (axes[static_cast<size_t>(a)]) m[static_cast<size_t>(a * 4)] = -1;
  }
  return m;
}

Matrix3 rot90_matrix(int64_t k, int64_t a, int64_t b) {
  // torch::rot90(x, 1, {a, b}) = x.flip(b).transpose(a, b): out[.., i_a, .., i_b, ..] reads
  // x[.., i_b, .., n - 1 - i_a, ..]; in offsets from the centre: source_a = u_b, source_b = -u_a.
  Matrix3 one = kIdentity3;
  one[static_cast<size_t>(a * 4)] = 0;
  one[static_cast<size_t>(b * 4)] = 0;
  one[static_cast<size_t>(a * 3 + b)] = 1;
  one[static_cast<size_t>(b * 3 + a)] = -1;
  Matrix3 m = kIdentity3;
  for (int64_t i = 0; i < ((k % 4) + 4) % 4; ++i) m = matmul(m, one);
  return m;
}

Matrix3 affine_matrix(const std::array<double, 3>& degrees, double scale) {
  Matrix3 m = kIdentity3;
  for (int axis = 0; axis < 3; ++axis) {
    const double r = degrees[static_cast<size_t>(axis)] * M_PI / 180.0;
    const double c = std::cos(r), s = std::sin(r);
    // Rotation in the plane of the two other axes (p, q).
    const int p = (axis + 1) % 3, q = (axis + 2) % 3;
    Matrix3 rot = kIdentity3;
    rot[static_cast<size_t>(p * 3 + p)] = c;
    rot[static_cast<size_t>(p * 3 + q)] = -s;
    rot[static_cast<size_t>(q * 3 + p)] = s;
    rot[static_cast<size_t>(q * 3 + q)] = c;
    m = matmul(m, rot);
  }
  for (auto& v : m) v /= scale;  // the patch samples a region 1 / scale as large: magnified
  return m;
}

bool is_signed_permutation(const Matrix3& m) {
  for (int i = 0; i < 3; ++i) {
    int row = 0, col = 0;
    for (int j = 0; j < 3; ++j) {
      const double r = m[static_cast<size_t>(i * 3 + j)], c = m[static_cast<size_t>(j * 3 + i)];
      if (r != 0 && r != 1 && r != -1) return false;
      row += r != 0;
      col += c != 0;
    }
    if (row != 1 || col != 1) return false;
  }
  return true;
}

int64_t slice_axis_of(const Shape3& patch) {
  int64_t axis = -1;
  for (int64_t a = 0; a < 3; ++a) {
    if (patch[static_cast<size_t>(a)] != 1) continue;
    if (axis >= 0) return -1;  // a line or a voxel, not a slice
    axis = a;
  }
  return axis;
}

torch::Tensor elastic_field(const torch::Tensor& control, const Shape3& patch) {
  TORCH_CHECK(control.dim() == 5 && control.size(1) == 3 && control.scalar_type() == torch::kFloat,
              "elastic_field: control points must be (N, 3, G, G, G) float32");
  namespace F = torch::nn::functional;
  return F::interpolate(control, F::InterpolateFuncOptions()
                                     .size(std::vector<int64_t>{patch[0], patch[1], patch[2]})
                                     .mode(torch::kTrilinear)
                                     .align_corners(true));
}

void resample_patch(const torch::Tensor& src, const PatchTransform& t, Interp interp, const float* pad,
                    torch::Tensor& dst) {
  // Each channel's (D, H, W) block contiguous; the channels any stride apart (a cache arena's view).
  auto dense = [&](int64_t d, int64_t stride) { return src.size(d) == 1 || src.stride(d) == stride; };
  TORCH_CHECK(src.dim() == 4 && src.device().is_cpu() && dense(3, 1) && dense(2, src.size(3)) &&
                  dense(1, src.size(2) * src.size(3)),
              "resample_patch: src must be (C, D, H, W) with contiguous channels");
  TORCH_CHECK(dst.dim() == 4 && dst.is_contiguous() && dst.size(0) == src.size(0) && dst.size(1) == t.patch[0] &&
                  dst.size(2) == t.patch[1] && dst.size(3) == t.patch[2],
              "resample_patch: dst must be (C, d, h, w) contiguous");
  const Shape3 dims = {src.size(1), src.size(2), src.size(3)};
  const int64_t channels = src.size(0);
  const int64_t channel_stride = src.stride(0);
  if (is_signed_permutation(t.matrix) && !t.displacement.defined()) {
    TORCH_CHECK(dst.scalar_type() == src.scalar_type() || dst.scalar_type() == torch::kFloat,
                "resample_patch: an exact copy keeps the dtype or writes float32");
    for (int a = 0; a < 3; ++a) {
      TORCH_CHECK(
          t.origin[static_cast<size_t>(a)] >= 0 &&
              t.origin[static_cast<size_t>(a)] + t.patch[static_cast<size_t>(a)] <= dims[static_cast<size_t>(a)],
          "resample_patch: the patch box leaves the volume");
    }
    const bool same = dst.scalar_type() == src.scalar_type();
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      if (same) {
        permute_copy<T, T>(src.data_ptr<T>(), dims, channels, channel_stride, t, dst.data_ptr<T>());
      } else {
        permute_copy<T, float>(src.data_ptr<T>(), dims, channels, channel_stride, t, dst.data_ptr<float>());
      }
    });
    return;
  }
  if (interp == Interp::kLinear) {
    TORCH_CHECK(dst.scalar_type() == torch::kFloat, "resample_patch: linear resampling writes float32");
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      resample_linear<T>(src.data_ptr<T>(), dims, channels, channel_stride, t, pad, dst.data_ptr<float>());
    });
  } else {
    TORCH_CHECK(dst.scalar_type() == src.scalar_type(), "resample_patch: nearest resampling keeps the dtype");
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      resample_nearest<T>(src.data_ptr<T>(), dims, channels, channel_stride, t, pad, dst.data_ptr<T>());
    });
  }
}

}  // namespace u3d
