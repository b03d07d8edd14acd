#include "u3d/augment.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "u3d/errors.h"

namespace u3d {
namespace {

constexpr double kPi = 3.14159265358979323846;

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
void permute_copy(const T* src, const Shape3& dims, int64_t channels, const PatchTransform& t, Out* dst) {
  const std::array<int64_t, 3> stride = {dims[1] * dims[2], dims[2], 1};
  const int64_t volume = dims[0] * dims[1] * dims[2];
  std::array<int64_t, 3> step{};
  int64_t start = 0;
  for (int j = 0; j < 3; ++j) {
    for (int a = 0; a < 3; ++a) {
      const double m = t.matrix[static_cast<size_t>(a * 3 + j)];
      if (m == 0) continue;
      const int64_t s = m > 0 ? 1 : -1;
      step[static_cast<size_t>(j)] = s * stride[static_cast<size_t>(a)];
      start += (s > 0 ? t.origin[static_cast<size_t>(a)] : t.origin[static_cast<size_t>(a)] + t.patch[static_cast<size_t>(j)] - 1) *
               stride[static_cast<size_t>(a)];
    }
  }
  const int64_t p0 = t.patch[0], p1 = t.patch[1], p2 = t.patch[2];
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i0 = 0; i0 < p0; ++i0) {
      for (int64_t i1 = 0; i1 < p1; ++i1) {
        const T* row = src + c * volume + start + i0 * step[0] + i1 * step[1];
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
template <typename F>
void for_each_source(const PatchTransform& t, F&& fn) {
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
        fn(centre[0] + m[0] * u0 + m[1] * u1 + m[2] * u2, centre[1] + m[3] * u0 + m[4] * u1 + m[5] * u2,
           centre[2] + m[6] * u0 + m[7] * u1 + m[8] * u2);
      }
    }
  }
}

// Trilinear resampling in blocks of output voxels: the block's corner indices and weights are
// computed once, then each channel is interpolated over the block (channel-planar data stays in
// cache).
template <typename T>
void resample_linear(const T* src, const Shape3& dims, int64_t channels, const PatchTransform& t, const float* pad,
                     float* dst) {
  const int64_t volume = dims[0] * dims[1] * dims[2];
  const int64_t out_volume = t.patch[0] * t.patch[1] * t.patch[2];
  const int64_t hw = dims[1] * dims[2];
  const int64_t tap[8] = {0, 1, dims[2], dims[2] + 1, hw, hw + 1, hw + dims[2], hw + dims[2] + 1};
  constexpr int64_t kBlock = 2048;
  std::vector<int64_t> base(kBlock);       // lower corner index; -1: some tap outside the volume
  std::vector<float> weight(kBlock * 8);
  std::vector<int64_t> index(kBlock * 8);  // border voxels: every tap's index, -1 outside
  int64_t o = 0, filled = 0;
  auto flush = [&] {
    for (int64_t c = 0; c < channels; ++c) {
      const T* s = src + c * volume;
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
void resample_nearest(const T* src, const Shape3& dims, int64_t channels, const PatchTransform& t, const float* pad,
                      T* dst) {
  const int64_t volume = dims[0] * dims[1] * dims[2];
  const int64_t out_volume = t.patch[0] * t.patch[1] * t.patch[2];
  int64_t o = 0;
  for_each_source(t, [&](double q0, double q1, double q2) {
    const int64_t z = static_cast<int64_t>(std::floor(q0 + 0.5)), y = static_cast<int64_t>(std::floor(q1 + 0.5)),
                  x = static_cast<int64_t>(std::floor(q2 + 0.5));
    const bool inside = z >= 0 && z < dims[0] && y >= 0 && y < dims[1] && x >= 0 && x < dims[2];
    const int64_t index = (z * dims[1] + y) * dims[2] + x;
    for (int64_t c = 0; c < channels; ++c) {
      dst[c * out_volume + o] = inside ? src[c * volume + index] : static_cast<T>(pad ? pad[c] : 0.0f);
    }
    ++o;
  });
}

template <typename F>
void dispatch_dtype(torch::ScalarType t, F&& f) {
  switch (t) {
    case torch::kUInt8: f(uint8_t{}); break;
    case torch::kInt16: f(int16_t{}); break;
    case torch::kHalf: f(c10::Half{}); break;
    case torch::kFloat: f(float{}); break;
    default: throw std::invalid_argument(fmt::format("resample_patch: dtype {} is not supported", c10::toString(t)));
  }
}

// CPU: out[b, channels[k]] = (float(field[b, k]) - sub[case_b, c]) / div[case_b, c] in one pass over
// the data, the same float32 operations (and so the same bits) as the tensor expression.
template <typename T>
void normalize_field(const torch::Tensor& field, const std::vector<int64_t>& channels, const std::vector<int64_t>& cases,
                     const float* sub, const float* div, int64_t in_channels, torch::Tensor& out) {
  const int64_t n = field.size(0), cf = field.size(1), voxels = field[0][0].numel();
  const T* src = field.data_ptr<T>();
  float* dst = out.data_ptr<float>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < cf; ++k) {
      const int64_t c = channels[static_cast<size_t>(k)];
      const float s = sub[cases[static_cast<size_t>(b)] * in_channels + c], d = div[cases[static_cast<size_t>(b)] * in_channels + c];
      const T* in = src + (b * cf + k) * voxels;
      float* o = dst + (b * in_channels + c) * voxels;
      for (int64_t v = 0; v < voxels; ++v) o[v] = (static_cast<float>(in[v]) - s) / d;
    }
  }
}

at::Generator noise_generator(const torch::Device& device, uint64_t seed) {
  if (device.is_cuda()) {
    at::Generator g = at::cuda::detail::createCUDAGenerator(device.index());
    g.set_current_seed(seed);
    return g;
  }
  return at::detail::createCPUGenerator(seed);
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
    const double r = degrees[static_cast<size_t>(axis)] * kPi / 180.0;
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

void resample_patch(const torch::Tensor& src, const PatchTransform& t, Interp interp, const float* pad,
                    torch::Tensor& dst) {
  TORCH_CHECK(src.dim() == 4 && src.is_contiguous() && src.device().is_cpu(), "resample_patch: src must be (C, D, H, W)");
  TORCH_CHECK(dst.dim() == 4 && dst.is_contiguous() && dst.size(0) == src.size(0) && dst.size(1) == t.patch[0] &&
                  dst.size(2) == t.patch[1] && dst.size(3) == t.patch[2],
              "resample_patch: dst must be (C, d, h, w) contiguous");
  const Shape3 dims = {src.size(1), src.size(2), src.size(3)};
  const int64_t channels = src.size(0);
  if (is_signed_permutation(t.matrix)) {
    TORCH_CHECK(dst.scalar_type() == src.scalar_type() || dst.scalar_type() == torch::kFloat,
                "resample_patch: an exact copy keeps the dtype or writes float32");
    for (int a = 0; a < 3; ++a) {
      TORCH_CHECK(t.origin[static_cast<size_t>(a)] >= 0 &&
                      t.origin[static_cast<size_t>(a)] + t.patch[static_cast<size_t>(a)] <= dims[static_cast<size_t>(a)],
                  "resample_patch: the patch box leaves the volume");
    }
    const bool same = dst.scalar_type() == src.scalar_type();
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      if (same) {
        permute_copy<T, T>(src.data_ptr<T>(), dims, channels, t, dst.data_ptr<T>());
      } else {
        permute_copy<T, float>(src.data_ptr<T>(), dims, channels, t, dst.data_ptr<float>());
      }
    });
    return;
  }
  if (interp == Interp::kLinear) {
    TORCH_CHECK(dst.scalar_type() == torch::kFloat, "resample_patch: linear resampling writes float32");
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      resample_linear<T>(src.data_ptr<T>(), dims, channels, t, pad, dst.data_ptr<float>());
    });
  } else {
    TORCH_CHECK(dst.scalar_type() == src.scalar_type(), "resample_patch: nearest resampling keeps the dtype");
    dispatch_dtype(src.scalar_type(), [&](auto tag) {
      using T = decltype(tag);
      resample_nearest<T>(src.data_ptr<T>(), dims, channels, t, pad, dst.data_ptr<T>());
    });
  }
}

// ---------------------------------------------------------------------------------------------
Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch b;
  b.image = image.to(device, non_blocking);
  b.target = target.to(device, non_blocking);
  if (mask.defined()) b.mask = mask.to(device, non_blocking);
  b.cases = cases;
  b.epoch = epoch;
  b.step = step;
  return b;
}

int64_t RawBatch::bytes() const {
  int64_t total = 0;
  for (const auto& t : images) total += t.numel() * static_cast<int64_t>(t.element_size());
  for (const auto* t : {&target, &mask, &plan}) {
    if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return total;
}

RawBatch RawBatch::to(const torch::Device& device, bool non_blocking) const {
  RawBatch r;
  for (const auto& t : images) r.images.push_back(t.to(device, non_blocking));
  if (target.defined()) r.target = target.to(device, non_blocking);
  if (mask.defined()) r.mask = mask.to(device, non_blocking);
  r.plan = plan.to(device, non_blocking);
  r.cases = cases;
  r.epoch = epoch;
  r.step = step;
  return r;
}

void RawBatch::copy_to(RawBatch& dst, bool non_blocking) const {
  for (size_t i = 0; i < images.size(); ++i) dst.images[i].copy_(images[i], non_blocking);
  if (target.defined()) dst.target.copy_(target, non_blocking);
  if (mask.defined()) dst.mask.copy_(mask, non_blocking);
  dst.plan.copy_(plan, non_blocking);
  dst.cases = cases;
  dst.epoch = epoch;
  dst.step = step;
}

// ---------------------------------------------------------------------------------------------
BatchFinalizer::BatchFinalizer(const StackedCache& cache, const AugmentConfig& augment,
                               std::vector<int64_t> intensity_channels, uint64_t seed)
    : cache_(cache), augment_(augment), intensity_channels_(std::move(intensity_channels)), seed_(seed) {}

const BatchFinalizer::DeviceTables& BatchFinalizer::tables(const torch::Device& device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = tables_.find(device.str());
  if (it != tables_.end()) return it->second;
  DeviceTables t;
  t.sub = cache_.norm_sub().to(device);
  t.div = cache_.norm_div().to(device);
  for (const auto& f : cache_.image_fields()) t.field_channels.push_back(torch::tensor(f.channels, torch::kLong).to(device));
  torch::Tensor chosen = torch::zeros({cache_.in_channels()}, torch::kBool);
  if (intensity_channels_.empty()) {
    chosen.fill_(true);
  } else {
    for (int64_t c : intensity_channels_) chosen[c] = true;
  }
  t.intensity = chosen.to(device);
  return tables_.emplace(device.str(), std::move(t)).first->second;
}

Batch BatchFinalizer::operator()(const RawBatch& raw) const {
  const torch::Device device = raw.plan.device();
  const DeviceTables& tb = tables(device);
  const int64_t n = raw.plan.size(0);
  const int64_t channels = cache_.in_channels();
  const auto fopt = torch::TensorOptions().dtype(torch::kFloat).device(device);
  Batch b;
  b.cases = raw.cases;
  b.epoch = raw.epoch;
  b.step = raw.step;

  // (N, C, d, h, w) float32 in raw units, then normalised per case and channel.
  const auto& first = raw.images.front();
  const std::vector<int64_t> shape = {n, channels, first.size(2), first.size(3), first.size(4)};
  if (device.is_cpu()) {
    std::vector<int64_t> cases(static_cast<size_t>(n));
    const torch::Tensor plan = raw.plan.contiguous();
    for (int64_t i = 0; i < n; ++i) {
      cases[static_cast<size_t>(i)] = static_cast<int64_t>(plan.data_ptr<double>()[i * kPlanColumns + kPlanCase]);
    }
    b.image = torch::empty(shape, fopt);
    const auto& fields = cache_.image_fields();
    for (size_t f = 0; f < raw.images.size(); ++f) {
      const torch::Tensor field = raw.images[f].contiguous();
      dispatch_dtype(field.scalar_type(), [&](auto tag) {
        using T = decltype(tag);
        normalize_field<T>(field, fields[f].channels, cases, tb.sub.data_ptr<float>(), tb.div.data_ptr<float>(), channels,
                           b.image);
      });
    }
  } else if (raw.images.size() == 1) {
    b.image = first.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  } else {
    b.image = torch::empty(shape, fopt);
    for (size_t f = 0; f < raw.images.size(); ++f) {
      b.image.index_copy_(1, tb.field_channels[f], raw.images[f].to(torch::kFloat));
    }
  }
  if (!device.is_cpu()) {
    const torch::Tensor cases = raw.plan.select(1, kPlanCase).to(torch::kLong);
    b.image.sub_(tb.sub.index_select(0, cases).view({n, channels, 1, 1, 1}))
        .div_(tb.div.index_select(0, cases).view({n, channels, 1, 1, 1}));
  }

  // Intensity transforms: one call each over the whole batch; untouched samples and channels get
  // the identity (factor 1, shift 0, gamma 1, noise 0).
  const torch::Tensor chosen = tb.intensity.view({1, channels});
  auto per_sample = [&](int64_t column) { return raw.plan.select(1, column).to(torch::kFloat).view({n, 1}); };
  auto spread = [&](const torch::Tensor& v) { return v.view({n, channels, 1, 1, 1}); };
  if (augment_.intensity_prob > 0) {
    const torch::Tensor scale = torch::where(chosen, per_sample(kPlanScale), torch::ones({1}, fopt));
    const torch::Tensor shift = torch::where(chosen, per_sample(kPlanShift), torch::zeros({1}, fopt));
    b.image.mul_(spread(scale)).add_(spread(shift));
  }
  if (augment_.gamma_prob > 0) {
    const torch::Tensor gamma = per_sample(kPlanGamma);
    const torch::Tensor lo = b.image.amin({2, 3, 4}, /*keepdim=*/true);
    const torch::Tensor range = (b.image.amax({2, 3, 4}, /*keepdim=*/true) - lo).clamp_min(1e-7);
    const torch::Tensor curved =
        ((b.image - lo) / range).clamp_(0, 1).pow_(gamma.view({n, 1, 1, 1, 1})).mul_(range).add_(lo);
    const torch::Tensor apply = spread(torch::logical_and(chosen, gamma != 1));
    b.image = torch::where(apply, curved, b.image);
  }
  if (augment_.noise_prob > 0) {
    const torch::Tensor std = torch::where(chosen, per_sample(kPlanNoise), torch::zeros({1}, fopt));
    at::Generator gen = noise_generator(device, mix64(mix64(seed_ ^ 0x4E4F495345ull) ^
                                                      mix64(static_cast<uint64_t>(raw.epoch) * 0x9E3779B97F4A7C15ull +
                                                            static_cast<uint64_t>(raw.step))));
    b.image.add_(torch::randn(b.image.sizes(), gen, fopt).mul_(spread(std)));
  }

  if (raw.target.defined()) {
    if (cache_.segmentation()) {
      b.target = raw.target.squeeze(1).to(torch::kLong);  // (N, d, h, w)
    } else {
      b.target = raw.target.to(torch::kFloat) / cache_.target_scale();  // (N, 1, d, h, w)
    }
  }
  if (raw.mask.defined()) b.mask = raw.mask.to(torch::kFloat);
  return b;
}

}  // namespace u3d
