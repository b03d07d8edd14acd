// DeviceSampler: PatchSampler's plans as tensor ops on the cache's device.
#include "u3d/data/device_sampler.h"

#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/core/rng.h"

namespace u3d {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

int64_t bits(uint64_t v) { return static_cast<int64_t>(v); }  // uint64 bit pattern as int64

// The counter-based generator of rng.h on int64 tensors holding uint64 bit patterns (integer
// multiplication and addition wrap, as in C++ unsigned arithmetic).
torch::Tensor shift_right(const torch::Tensor& x, int64_t k) {  // logical shift
  return x.bitwise_right_shift(k).bitwise_and(bits((uint64_t{1} << (64 - k)) - 1));
}
torch::Tensor mix(torch::Tensor z) {
  z = z + bits(kGolden);
  z = (z ^ shift_right(z, 30)) * bits(0xBF58476D1CE4E5B9ull);
  z = (z ^ shift_right(z, 27)) * bits(0x94D049BB133111EBull);
  return z ^ shift_right(z, 31);
}

// Per-sample streams, as SampleStream in sampler.cpp: every function gives one value per sample.
struct Streams {
  torch::Tensor state;  // (N,) int64
  torch::Tensor u64(uint64_t slot) const { return mix(state + bits(slot * kGolden)); }
  static torch::Tensor unit(const torch::Tensor& v) {  // 53 random bits -> [0, 1)
    return shift_right(v, 11).to(torch::kDouble) * (1.0 / 9007199254740992.0);
  }
  torch::Tensor uniform(uint64_t slot) const { return unit(u64(slot)); }
  torch::Tensor uniform(uint64_t slot, double lo, double hi) const { return uniform(slot) * (hi - lo) + lo; }
  // floor(u64 * n / 2^64) for 0 < n < 2^31, in 64-bit pieces.
  torch::Tensor uniform_int(uint64_t slot, const torch::Tensor& n) const {
    const torch::Tensor v = u64(slot);
    const torch::Tensor hi = shift_right(v, 32), lo = v.bitwise_and(bits(0xFFFFFFFFull));
    return shift_right(hi * n + shift_right(lo * n, 32), 32);
  }
  torch::Tensor bernoulli(uint64_t slot, double p) const { return uniform(slot) < p; }
  // Uniform in [lo, hi) at many slots at once: keys (1, K) int64 holding slot * kGolden -> (N, K).
  torch::Tensor uniform_at(const torch::Tensor& keys, double lo, double hi) const {
    return unit(mix(state.view({-1, 1}) + keys)) * (hi - lo) + lo;
  }
};

}  // namespace

DeviceSampler::DeviceSampler(const PatchSampler& host, const BatchFinalizer* finish)
    : host_(host),
      own_finish_(finish ? nullptr : host.new_finalizer()),
      finish_(finish ? finish : own_finish_.get()),
      device_(host.cache().device()) {
  const StackedCache& cache = host.cache();
  const auto& o = host.options();
  const int64_t n = cache.size();
  std::vector<int64_t> geometry;
  for (int64_t i = 0; i < n; ++i) {
    const Shape3 s = cache.shape(i);
    geometry.insert(geometry.end(), {cache.voxel_offset(i), s[0], s[1], s[2]});
  }
  geometry_ = torch::tensor(geometry, torch::kLong).view({n, 4}).to(device_);
  std::vector<int64_t> offset, count;
  std::vector<torch::Tensor> voxels;
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = host.foreground().empty() ? 0 : host.foreground()[static_cast<size_t>(i)].size(0);
    offset.push_back(total);
    count.push_back(k);
    total += k;
    if (k > 0) voxels.push_back(host.foreground()[static_cast<size_t>(i)]);
  }
  fg_offset_ = torch::tensor(offset, torch::kLong).to(device_);
  fg_count_ = torch::tensor(count, torch::kLong).to(device_);
  fg_voxels_ = voxels.empty() ? torch::zeros({0, 3}, torch::kLong).to(device_) : torch::cat(voxels).to(device_);
  std::vector<torch::Tensor> rot;
  for (int64_t k = 0; k < 4; ++k) {
    const Matrix3 m =
        o.augment.rot90_prob > 0 ? rot90_matrix(k, o.augment.rot90_plane[0], o.augment.rot90_plane[1]) : kIdentity3;
    rot.push_back(torch::tensor(std::vector<double>(m.begin(), m.end()), torch::kDouble).view({3, 3}));
  }
  rot_matrices_ = torch::stack(rot).to(device_);
  pad_raw_ = (static_cast<float>(o.pad_value) * cache.norm_div() + cache.norm_sub()).to(device_);
  for (const auto& f : cache.image_fields()) {
    field_pad_.push_back(pad_raw_.index_select(1, torch::tensor(f.channels, torch::kLong).to(device_)));
  }
  epoch_key_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device_));
  const Shape3& patch = o.patch;
  std::vector<torch::Tensor> axes;
  for (int64_t a = 0; a < 3; ++a) {
    const int64_t p = patch[static_cast<size_t>(a)];
    axes.push_back(torch::arange(p, torch::kDouble) - (static_cast<double>(p) - 1.0) / 2.0);
  }
  const auto grid = torch::meshgrid(axes, "ij");
  offsets_ =
      torch::stack({grid[0].reshape(-1), grid[1].reshape(-1), grid[2].reshape(-1)}, 1).to(device_);  // (S, 3) float64
  patch_ = torch::tensor({patch[0], patch[1], patch[2]}, torch::kLong).view({1, 3}).to(device_);
  half_ = torch::tensor({patch[0] / 2, patch[1] / 2, patch[2] / 2}, torch::kLong).to(device_);
  if (o.augment.elastic_prob > 0) {
    const int64_t g = o.augment.elastic_grid;
    std::vector<int64_t> keys(static_cast<size_t>(3 * g * g * g));
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = bits((kSlotElasticGrid + i) * kGolden);
    elastic_keys_ = torch::tensor(keys, torch::kLong).view({1, -1}).to(device_);
  }
}

void DeviceSampler::set_epoch(int64_t epoch, int64_t steps_per_epoch) {
  const int64_t count = steps_per_epoch * host_.options().shards * host_.options().batch_size;  // the global epoch
  std::vector<int64_t> cases(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) cases[static_cast<size_t>(i)] = host_.case_for(epoch, i);
  const torch::Tensor host_cases = torch::tensor(cases, torch::kLong);
  if (epoch_cases_.defined() && epoch_cases_.numel() == count) {
    epoch_cases_.copy_(host_cases);  // same buffer: a captured graph reads it
  } else {
    epoch_cases_ = host_cases.to(device_);
  }
  const uint64_t seed = host_.options().seed;
  epoch_key_.fill_(bits(mix64(seed) ^ mix64(static_cast<uint64_t>(epoch) + 0x632BE59BD9B4E019ull)));
  epoch_ = epoch;
}

void DeviceSampler::seek(int64_t epoch, int64_t step, int64_t steps_per_epoch) {
  if (!cursor_.defined()) cursor_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device_));
  if (epoch_ != epoch) {
    set_epoch(epoch, steps_per_epoch);
    cursor_host_ = -1;
  }
  if (cursor_host_ != step) cursor_.fill_(step);
  cursor_host_ = step + 1;  // where next_batch() (eager, or a replay) leaves it
}

Batch DeviceSampler::next_batch() {
  if (!cursor_.defined()) throw std::logic_error("DeviceSampler: call seek() first");
  Batch b = (*finish_)(raw_batch(cursor_));
  cursor_.add_(1);
  return b;
}

bool DeviceSampler::capturable(std::string* why) const {
  if (host_.options().augment.noise_prob > 0) {
    if (why) *why = "augment.noise_prob > 0 (the noise generator is seeded on the host per batch)";
    return false;
  }
  return true;
}

RawBatch DeviceSampler::raw_batch(int64_t step) const {
  RawBatch r = raw_batch(torch::full({}, step, torch::TensorOptions().dtype(torch::kLong).device(device_)));
  r.step = step;
  return r;
}

Batch DeviceSampler::batch(int64_t step) const { return (*finish_)(raw_batch(step)); }

RawBatch DeviceSampler::raw_batch(const torch::Tensor& step) const {
  if (epoch_ < 0) throw std::logic_error("DeviceSampler: call set_epoch() first");
  const StackedCache& cache = host_.cache();
  const auto& o = host_.options();
  const auto& aug = o.augment;
  const int64_t n = o.batch_size;
  const auto lopt = torch::TensorOptions().dtype(torch::kLong).device(device_);
  const auto dopt = torch::TensorOptions().dtype(torch::kDouble).device(device_);
  const auto fopt = torch::TensorOptions().dtype(torch::kFloat).device(device_);
  const Shape3& patch = o.patch;

  // Streams of samples step * n + b: Rng(seed, epoch, index).state() on the device.
  // This shard's batch of the global step (SamplerOptions::shard).
  const torch::Tensor index = (step.to(lopt) * o.shards + o.shard) * n + torch::arange(n, lopt);  // (N,)
  const Streams r{mix(mix(index + bits(0x8CB92BA72F3D8DD7ull)) ^ epoch_key_)};
  const torch::Tensor cases = epoch_cases_.index_select(0, index);  // (N,)
  const torch::Tensor geom = geometry_.index_select(0, cases);      // (N, 4): offset, D, H, W
  const torch::Tensor dims = geom.slice(1, 1, 4);                   // (N, 3)

  // Crop origins: uniform, or centred on a foreground voxel.
  std::vector<torch::Tensor> uniform_origin;
  for (int64_t a = 0; a < 3; ++a) {
    uniform_origin.push_back(
        r.uniform_int(kSlotOrigin + static_cast<uint64_t>(a), dims.select(1, a) - patch[static_cast<size_t>(a)] + 1));
  }
  torch::Tensor origin = torch::stack(uniform_origin, 1);  // (N, 3)
  if (o.foreground_fraction > 0 && fg_voxels_.size(0) > 0) {
    const torch::Tensor count = fg_count_.index_select(0, cases);
    const torch::Tensor centred = r.bernoulli(kSlotForeground, o.foreground_fraction).logical_and(count > 0);
    const torch::Tensor pick = fg_offset_.index_select(0, cases) + r.uniform_int(kSlotVoxel, count.clamp_min(1));
    const torch::Tensor voxel = fg_voxels_.index_select(0, pick.clamp_max(fg_voxels_.size(0) - 1));  // (N, 3)
    const torch::Tensor centred_origin = torch::minimum(torch::clamp_min(voxel - half_, 0), dims - patch_);
    origin = torch::where(centred.view({n, 1}), centred_origin, origin);
  }

  // Spatial matrices M = A R F, (N, 3, 3) float64.
  const torch::Tensor eye = torch::eye(3, dopt).expand({n, 3, 3});
  torch::Tensor m = eye.clone();
  if (aug.flip_prob > 0) {
    torch::Tensor sign = torch::ones({n, 3}, dopt);
    for (int64_t a : aug.flip_axes) {
      sign.select(1, a).copy_(
          torch::where(r.bernoulli(kSlotFlip + static_cast<uint64_t>(a), aug.flip_prob), -1.0, 1.0).to(torch::kDouble));
    }
    m = torch::diag_embed(sign);
  }
  if (aug.rot90_prob > 0) {
    const torch::Tensor k =
        torch::where(r.bernoulli(kSlotRot90, aug.rot90_prob),
                     r.uniform_int(kSlotRot90 + 1, torch::full({n}, 3, lopt)) + 1, torch::zeros({n}, lopt));
    m = torch::bmm(rot_matrices_.index_select(0, k), m);
  }
  const int64_t slice_axis = slice_axis_of(patch);  // a slice: in-plane transforms only (augment.h)
  if (aug.affine_prob > 0) {
    torch::Tensor a = eye.clone();
    for (int64_t axis = 0; axis < 3; ++axis) {
      if (slice_axis >= 0 && axis != slice_axis) continue;  // out of the slice's plane: no rotation
      const double lim = aug.affine_rotation[static_cast<size_t>(axis)];
      const torch::Tensor rad = r.uniform(kSlotAffine + 1 + static_cast<uint64_t>(axis), -lim, lim) * M_PI / 180.0;
      const torch::Tensor c = torch::cos(rad), s = torch::sin(rad);
      const int64_t p = (axis + 1) % 3, q = (axis + 2) % 3;
      torch::Tensor rot = eye.clone();
      rot.select(1, p).select(1, p).copy_(c);
      rot.select(1, p).select(1, q).copy_(-s);
      rot.select(1, q).select(1, p).copy_(s);
      rot.select(1, q).select(1, q).copy_(c);
      a = torch::bmm(a, rot);
    }
    a = a / r.uniform(kSlotAffine + 4, aug.affine_scale[0], aug.affine_scale[1]).view({n, 1, 1});
    a = torch::where(r.bernoulli(kSlotAffine, aug.affine_prob).view({n, 1, 1}), a, eye);
    m = torch::bmm(a, m);
  }

  // Source coordinates of every patch voxel: centre + M (p - pc), (N, S, 3) float64, summed in the
  // host's order (augment.cpp, for_each_source): centre + m0 u0 + m1 u1 + m2 u2. Element-wise, not
  // a matmul: cuBLAS would round the coordinates to TF32, and the host sampler's nearest-neighbour
  // labels and masks would differ wherever a coordinate lands near a half voxel.
  const int64_t voxels = patch[0] * patch[1] * patch[2];
  // centre = origin + pc, with pc = (patch - 1) / 2 = -offsets[0].
  const torch::Tensor centre = origin.to(torch::kDouble) - offsets_.select(0, 0).view({1, 3});
  torch::Tensor q = centre.view({n, 1, 3});
  for (int64_t j = 0; j < 3; ++j) {
    q = q + offsets_.select(1, j).view({1, voxels, 1}) * m.select(2, j).view({n, 1, 3});
  }
  // Elastic: + disp(p), the host's control values (float32) upsampled by elastic_field, times a
  // per-sample 0/1 (static shapes; 0 leaves q exactly as it was).
  if (aug.elastic_prob > 0) {
    const int64_t g = aug.elastic_grid;
    torch::Tensor control =
        r.uniform_at(elastic_keys_, -aug.elastic_magnitude, aug.elastic_magnitude).to(torch::kFloat);
    if (slice_axis >= 0) {  // no displacement along the slice axis
      const torch::Tensor c = control.view({n, 3, g * g * g});
      const int64_t a = slice_axis;
      control = torch::cat({c.narrow(1, 0, a), torch::zeros_like(c.narrow(1, a, 1)), c.narrow(1, a + 1, 2 - a)}, 1);
    }
    const torch::Tensor apply = r.bernoulli(kSlotElastic, aug.elastic_prob).to(torch::kFloat).view({n, 1, 1});
    const torch::Tensor disp = elastic_field(control.view({n, 3, g, g, g}), patch).view({n, 3, voxels}) * apply;
    q = q + disp.transpose(1, 2).to(torch::kDouble);
  }

  // Reads go to each field's planes (Cf, V) (cache.h): one int64 column per patch voxel, (N, S),
  // serves every channel at once (index_select of columns), never an (N, Cf, S) index tensor.
  const torch::Tensor size_d = geom.select(1, 1).view({n, 1}), size_h = geom.select(1, 2).view({n, 1}),
                      size_w = geom.select(1, 3).view({n, 1});        // (N, 1)
  const torch::Tensor first_column = geom.select(1, 0).view({n, 1});  // (N, 1): the case's voxel offset
  // Column of voxel (z, y, x) of each sample's case, 0 where `inside` is false: (N, S) int64.
  auto column = [&](const torch::Tensor& z, const torch::Tensor& y, const torch::Tensor& x,
                    const torch::Tensor& inside) {
    return (first_column + (z * size_h + y) * size_w + x).masked_fill(inside.logical_not(), 0);
  };
  auto within = [](const torch::Tensor& v, const torch::Tensor& size) { return v.ge(0).logical_and(v.lt(size)); };
  // (N, Cf, S) values of `planes` at `columns` (N, S): a view of the (Cf, N, S) gather.
  auto take = [&](const torch::Tensor& planes, const torch::Tensor& columns) {
    return planes.index_select(1, columns.view(-1)).view({planes.size(0), n, voxels}).transpose(0, 1);
  };
  // Nearest-neighbour (exact at integer coordinates) and trilinear sources, shared by every field.
  torch::Tensor near_column, near_inside;  // (N, S)
  auto nearest_source = [&] {
    if (near_column.defined()) return;
    const torch::Tensor at = torch::floor(q + 0.5).to(torch::kLong);  // (N, S, 3)
    const torch::Tensor z = at.select(2, 0), y = at.select(2, 1), x = at.select(2, 2);
    near_inside = within(z, size_d).logical_and(within(y, size_h)).logical_and(within(x, size_w));
    near_column = column(z, y, x, near_inside);
  };
  // Trilinear: the lower corners and weights once; each of the 8 taps made when a field reads it, so
  // one tap's (N, S) column, inside and weight are alive at a time.
  torch::Tensor lower, weights;  // (N, S, 3) int64 and float32
  struct Tap {
    torch::Tensor column, inside, weight;  // (N, S) int64, bool, float32
  };
  auto tap = [&](int64_t k) {
    if (!lower.defined()) {
      const torch::Tensor floor = torch::floor(q);
      weights = (q - floor).to(torch::kFloat);  // as the host's weights
      lower = floor.to(torch::kLong);
    }
    const int64_t dz = k >> 2, dy = (k >> 1) & 1, dx = k & 1;
    auto axis = [&](int64_t a, int64_t d) { return d ? lower.select(2, a) + 1 : lower.select(2, a); };
    const torch::Tensor z = axis(0, dz), y = axis(1, dy), x = axis(2, dx);
    Tap t;
    t.inside = within(z, size_d).logical_and(within(y, size_h)).logical_and(within(x, size_w));
    t.column = column(z, y, x, t.inside);
    t.weight = (dz ? weights.select(2, 0) : 1 - weights.select(2, 0)) *
               (dy ? weights.select(2, 1) : 1 - weights.select(2, 1)) *
               (dx ? weights.select(2, 2) : 1 - weights.select(2, 2));
    return t;
  };
  // One field, (N, Cf, d, h, w): nearest (exact at integer coordinates) or trilinear (float32).
  auto gather = [&](const CacheField& f, bool linear, const torch::Tensor& pad) {
    const int64_t cf = f.channel_count();
    const torch::Tensor planes = cache.planes(f);
    auto fill_outside = [&](const torch::Tensor& v, const torch::Tensor& inside) {
      return pad.defined() ? torch::where(inside.unsqueeze(1), v.to(torch::kFloat), pad.view({n, cf, 1}))
                           : v.masked_fill(inside.logical_not().unsqueeze(1), 0);
    };
    torch::Tensor out;
    if (!linear) {
      nearest_source();
      out = fill_outside(take(planes, near_column), near_inside);
    } else {
      out = torch::zeros({n, cf, voxels}, fopt);
      for (int64_t k = 0; k < 8; ++k) {
        const Tap t = tap(k);
        out.add_(fill_outside(take(planes, t.column).to(torch::kFloat), t.inside) * t.weight.unsqueeze(1));
      }
    }
    return out.view({n, cf, patch[0], patch[1], patch[2]});
  };

  RawBatch raw;
  const bool resampled = host_.resampling_enabled();
  const auto& fields = cache.image_fields();
  for (size_t f = 0; f < fields.size(); ++f) {
    const torch::Tensor pad = resampled ? field_pad_[f].index_select(0, cases) : torch::Tensor();
    raw.images.push_back(gather(fields[f], resampled, pad));
  }
  if (cache.target()) raw.target = gather(*cache.target(), resampled && !cache.segmentation(), torch::Tensor());
  if (cache.mask()) raw.mask = gather(*cache.mask(), /*linear=*/false, torch::Tensor());
  if (cache.skeleton()) raw.skeleton = gather(*cache.skeleton(), /*linear=*/false, torch::Tensor());
  if (cache.distance()) raw.distance = gather(*cache.distance(), resampled, torch::Tensor());

  // Intensity parameters per sample (identity where not drawn).
  auto draw = [&](double prob, uint64_t slot, const std::vector<double>& range, double identity) {
    const torch::Tensor value = r.uniform(slot + 1, range[0], range[1]);
    return prob > 0 ? torch::where(r.bernoulli(slot, prob), value, torch::full({n}, identity, dopt))
                    : torch::full({n}, identity, dopt);
  };
  const torch::Tensor scale = draw(aug.intensity_prob, kSlotIntensity, aug.intensity_scale, 1.0);
  const torch::Tensor shift =
      aug.intensity_prob > 0
          ? torch::where(r.bernoulli(kSlotIntensity, aug.intensity_prob),
                         r.uniform(kSlotIntensity + 2, aug.intensity_shift[0], aug.intensity_shift[1]),
                         torch::zeros({n}, dopt))
          : torch::zeros({n}, dopt);
  const torch::Tensor gamma = draw(aug.gamma_prob, kSlotGamma, aug.gamma_range, 1.0);
  const torch::Tensor noise = draw(aug.noise_prob, kSlotNoise, aug.noise_std, 0.0);
  raw.plan = torch::stack({cases.to(torch::kDouble), scale, shift, gamma, noise}, 1);  // (N, kPlanColumns)
  raw.epoch = epoch_;
  return raw;
}

}  // namespace u3d
