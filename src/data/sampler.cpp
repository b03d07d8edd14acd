#include "u3d/data/sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "u3d/core/errors.h"
#include "u3d/core/faults.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/rng.h"
#include "u3d/core/text.h"
#include "u3d/data/finalize.h"

namespace u3d {
namespace {
constexpr uint64_t kShuffleStream = 0x5A3D1E0000000000ull;

// A sample's stream: value k of Rng(seed, epoch, index), as the DeviceSampler computes it.
class SampleStream {
 public:
  SampleStream(uint64_t seed, int64_t epoch, int64_t index)
      : state_(Rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)).state()) {}
  uint64_t u64(uint64_t slot) const { return Rng::value_at(state_, slot); }
  double uniform(uint64_t slot) const { return static_cast<double>(u64(slot) >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(uint64_t slot, double lo, double hi) const { return lo + (hi - lo) * uniform(slot); }
  int64_t uniform_int(uint64_t slot, int64_t n) const {
    return static_cast<int64_t>((static_cast<unsigned __int128>(u64(slot)) * static_cast<uint64_t>(n)) >> 64);
  }
  bool bernoulli(uint64_t slot, double p) const { return uniform(slot) < p; }

 private:
  uint64_t state_;
};

}  // namespace

torch::Tensor foreground_mask(const CachedCase& c, const std::string& spec,
                              const std::vector<std::string>& channel_names) {
  const bool labels = c.target.defined() && c.target.scalar_type() == torch::kUInt8;  // segmentation
  auto target_volume = [&]() {
    if (!c.target.defined()) throw ConfigError(fmt::format("data.foreground: case '{}' has no target", c.id));
    return labels ? c.target : c.target[0];  // (D, H, W)
  };
  if (spec == "auto" || spec == "target") return target_volume() > 0;
  if (spec == "mask") {
    if (!c.mask.defined()) {
      throw ConfigError(fmt::format("data.foreground: mask, but case '{}' has no loss mask", c.id));
    }
    return c.mask[0] > 0;
  }
  if (spec.rfind("channel:", 0) == 0) {
    const std::string name = spec.substr(8);
    const torch::Tensor ch = c.image[channel_index(channel_names, name, "data.foreground", "an input channel")];
    return ch > ch.min();
  }
  if (spec.rfind("labels:", 0) == 0) {
    if (!labels) throw ConfigError("data.foreground: labels:... needs a segmentation dataset");
    const auto wanted = parse_int_list(spec.substr(7));  // checked by the config (check_foreground_spec)
    if (!wanted) throw ConfigError(fmt::format("data.foreground: '{}': labels must be integers >= 1", spec));
    return torch::isin(c.target.to(torch::kLong), torch::tensor(*wanted, torch::kLong).to(c.target.device()));
  }
  throw ConfigError(fmt::format("data.foreground: '{}' is not a foreground spec", spec));
}

torch::Tensor foreground_mask(const StackedCache& cache, int64_t i, const std::string& spec,
                              const std::vector<std::string>& channel_names) {
  CachedCase c;  // views in the cache's raw units: every spec compares with 0 or the channel minimum
  c.id = cache.id(i);
  if (cache.target()) {
    const torch::Tensor t = cache.view(*cache.target(), i);  // (1, D, H, W)
    c.target = cache.segmentation() ? t[0] : t;
  }
  if (cache.mask()) c.mask = cache.view(*cache.mask(), i);
  if (spec.rfind("channel:", 0) == 0) {
    std::vector<torch::Tensor> channels;
    for (int64_t ch = 0; ch < cache.in_channels(); ++ch) channels.push_back(cache.channel(i, ch).to(torch::kFloat));
    c.image = torch::stack(channels);
  }
  return foreground_mask(c, spec, channel_names);
}

// ---------------------------------------------------------------------------------------------
SamplerOptions sampler_options(const Config& cfg, std::vector<std::string> channel_names) {
  SamplerOptions so;
  so.patch = cfg.data.patch_size;
  so.batch_size = cfg.data.batch_size;
  so.seed = static_cast<uint64_t>(cfg.experiment.seed);
  so.augment = cfg.augment;
  so.foreground_fraction = cfg.data.foreground_fraction;
  so.foreground = cfg.data.foreground;
  so.channel_names = std::move(channel_names);
  so.pad_value = cfg.data.pad_value;
  return so;
}

PatchSampler::PatchSampler(const StackedCache& cache, SamplerOptions options)
    : cache_(&cache), options_(std::move(options)) {
  init();
}

PatchSampler::PatchSampler(const TensorCache& cache, SamplerOptions options)
    : owned_(std::make_shared<StackedCache>(StackedCache::from_cases(cache.cases()))),
      cache_(owned_.get()),
      options_(std::move(options)) {
  init();
}

void check_batch_memory(int64_t batch_size, const Shape3& patch, int64_t channels) {
  const double batch_bytes = 4.0 * static_cast<double>(batch_size) * static_cast<double>(channels) *
                             static_cast<double>(patch[0]) * static_cast<double>(patch[1]) *
                             static_cast<double>(patch[2]);
  const int64_t host_free = available_bytes(CachePlacement::kMemory, torch::kCPU);
  if (host_free > 0 && batch_bytes > 0.5 * static_cast<double>(host_free)) {
    throw ConfigError(
        fmt::format("data.batch_size: {} samples of {} channels x [{}, {}, {}] float32 need {} per batch, "
                    "more than half of the {} of memory available; lower data.batch_size or "
                    "data.patch_size",
                    batch_size, channels, patch[0], patch[1], patch[2], human_bytes(batch_bytes),
                    human_bytes(static_cast<double>(host_free))));
  }
}

void PatchSampler::init() {
  const StackedCache& cache = *cache_;
  if (cache.size() == 0) throw ConfigError("data: the training split holds no cases");
  for (int64_t i = 0; i < cache.size(); ++i) {
    const Shape3 s = cache.shape(i);
    for (int a = 0; a < 3; ++a) {
      if (options_.patch[a] > s[a]) {
        throw ConfigError(fmt::format(
            "data.patch_size: [{}, {}, {}] is larger than case '{}' ({}, {}, {}); use a patch no larger than the "
            "smallest volume",
            options_.patch[0], options_.patch[1], options_.patch[2], cache.id(i), s[0], s[1], s[2]));
      }
    }
  }
  check_batch_memory(options_.batch_size, options_.patch, cache.in_channels());
  const auto& aug = options_.augment;
  if (aug.rot90_prob > 0) {
    const auto& rp = aug.rot90_plane;
    if (rp.size() != 2 || options_.patch[static_cast<size_t>(rp[0])] != options_.patch[static_cast<size_t>(rp[1])]) {
      throw ConfigError("augment.rot90_plane: the patch must be square in the rotation plane");
    }
  }
  for (const auto& name : aug.intensity_channels) {
    intensity_channels_.push_back(
        channel_index(options_.channel_names, name, "augment.intensity_channels", "an input channel"));
  }
  std::sort(intensity_channels_.begin(), intensity_channels_.end());
  if (options_.foreground_fraction > 0) {
    for (int64_t i = 0; i < cache.size(); ++i) {
      torch::Tensor voxels = foreground_mask(cache, i, options_.foreground, options_.channel_names).nonzero().cpu();
      if (voxels.size(0) == 0) {
        spdlog::warn("sampler: case '{}' has no foreground ({}); its foreground patches are drawn uniformly",
                     cache.id(i), options_.foreground);
      } else if (voxels.size(0) > options_.max_foreground_voxels) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(mix64(options_.seed ^ mix64(static_cast<uint64_t>(i))));
        voxels = voxels.index_select(
            0, torch::randperm(voxels.size(0), gen, torch::kLong).slice(0, 0, options_.max_foreground_voxels));
      }
      foreground_.push_back(voxels.contiguous());
    }
  }
  fault_case_ = TestFaults::from_env().sampler_case;  // sampler_case@ID (faults.h)
}

int64_t PatchSampler::case_for(int64_t epoch, int64_t index) const {
  const int64_t n = cache_->size();
  const int64_t pass = index / n;
  // Fisher-Yates shuffle of 0..n-1 for this (epoch, pass).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(options_.seed, static_cast<uint64_t>(epoch), kShuffleStream + static_cast<uint64_t>(pass));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.uniform_int(i + 1))]);
  return order[static_cast<size_t>(index % n)];
}

SamplePlan PatchSampler::plan(int64_t epoch, int64_t index) const {
  const auto& aug = options_.augment;
  const SampleStream r(options_.seed, epoch, index);
  SamplePlan p;
  p.index = index;
  p.case_index = case_for(epoch, index);
  const Shape3 dims = cache_->shape(p.case_index);
  auto& t = p.transform;
  t.patch = options_.patch;
  const torch::Tensor* fg = foreground_.empty() ? nullptr : &foreground_[static_cast<size_t>(p.case_index)];
  p.centred =
      options_.foreground_fraction > 0 && r.bernoulli(kSlotForeground, options_.foreground_fraction) && fg->size(0) > 0;
  if (p.centred) {
    const int64_t* voxel = fg->data_ptr<int64_t>() + 3 * r.uniform_int(kSlotVoxel, fg->size(0));
    for (int a = 0; a < 3; ++a) {
      t.origin[static_cast<size_t>(a)] =
          std::clamp<int64_t>(voxel[a] - t.patch[static_cast<size_t>(a)] / 2, 0,
                              dims[static_cast<size_t>(a)] - t.patch[static_cast<size_t>(a)]);
    }
  } else {
    for (int a = 0; a < 3; ++a) {
      t.origin[static_cast<size_t>(a)] = r.uniform_int(
          kSlotOrigin + static_cast<uint64_t>(a), dims[static_cast<size_t>(a)] - t.patch[static_cast<size_t>(a)] + 1);
    }
  }
  if (!options_.apply_augmentation) return p;  // validation patches: plain crops
  // Spatial: M = A R F (affine of the rotated mirrored patch; augment.h).
  std::array<bool, 3> flips{};
  if (aug.flip_prob > 0) {
    for (int64_t a : aug.flip_axes)
      flips[static_cast<size_t>(a)] = r.bernoulli(kSlotFlip + static_cast<uint64_t>(a), aug.flip_prob);
  }
  Matrix3 m = flip_matrix(flips);
  if (aug.rot90_prob > 0 && r.bernoulli(kSlotRot90, aug.rot90_prob)) {
    m = matmul(rot90_matrix(1 + r.uniform_int(kSlotRot90 + 1, 3), aug.rot90_plane[0], aug.rot90_plane[1]), m);
  }
  const int64_t slice_axis = slice_axis_of(t.patch);  // a slice: in-plane transforms only (augment.h)
  if (aug.affine_prob > 0 && r.bernoulli(kSlotAffine, aug.affine_prob)) {
    std::array<double, 3> degrees{};
    for (int a = 0; a < 3; ++a) {
      if (slice_axis >= 0 && a != slice_axis) continue;  // out of the slice's plane: 0
      const double lim = aug.affine_rotation[static_cast<size_t>(a)];
      degrees[static_cast<size_t>(a)] = r.uniform(kSlotAffine + 1 + static_cast<uint64_t>(a), -lim, lim);
    }
    const double scale = r.uniform(kSlotAffine + 4, aug.affine_scale[0], aug.affine_scale[1]);
    m = matmul(affine_matrix(degrees, scale), m);
    p.affine = !is_signed_permutation(m);
  }
  t.matrix = m;
  if (aug.elastic_prob > 0 && r.bernoulli(kSlotElastic, aug.elastic_prob)) {
    const int64_t g = aug.elastic_grid;
    const double lim = aug.elastic_magnitude;
    torch::Tensor control = torch::empty({1, 3, g, g, g}, torch::kFloat);
    float* c = control.data_ptr<float>();
    for (int64_t i = 0; i < control.numel(); ++i) {
      c[i] = static_cast<float>(r.uniform(kSlotElasticGrid + static_cast<uint64_t>(i), -lim, lim));
    }
    if (slice_axis >= 0) control.select(1, slice_axis).zero_();
    t.displacement = elastic_field(control, t.patch)[0];  // (3, d, h, w)
    p.elastic = true;
  }
  // Intensity parameters (applied per batch by the finalizer).
  if (aug.intensity_prob > 0 && r.bernoulli(kSlotIntensity, aug.intensity_prob)) {
    p.scale = r.uniform(kSlotIntensity + 1, aug.intensity_scale[0], aug.intensity_scale[1]);
    p.shift = r.uniform(kSlotIntensity + 2, aug.intensity_shift[0], aug.intensity_shift[1]);
  }
  if (aug.gamma_prob > 0 && r.bernoulli(kSlotGamma, aug.gamma_prob)) {
    p.gamma = r.uniform(kSlotGamma + 1, aug.gamma_range[0], aug.gamma_range[1]);
  }
  if (aug.noise_prob > 0 && r.bernoulli(kSlotNoise, aug.noise_prob)) {
    p.noise_std = r.uniform(kSlotNoise + 1, aug.noise_std[0], aug.noise_std[1]);
  }
  return p;
}

RawBatch PatchSampler::allocate_raw(bool pinned) const {
  const StackedCache& cache = *cache_;
  const int64_t n = options_.batch_size;
  const auto& s = options_.patch;
  const bool resampled = resampling_enabled();
  auto opts = [&](torch::ScalarType t) { return torch::TensorOptions().dtype(t).pinned_memory(pinned); };
  RawBatch r;
  for (const auto& f : cache.image_fields()) {
    r.images.push_back(
        torch::empty({n, f.channel_count(), s[0], s[1], s[2]}, opts(resampled ? torch::kFloat : f.dtype)));
  }
  if (cache.target()) {
    const bool linear = resampled && !cache.segmentation();
    r.target = torch::empty({n, 1, s[0], s[1], s[2]}, opts(linear ? torch::kFloat : cache.target()->dtype));
  }
  if (cache.mask()) r.mask = torch::empty({n, 1, s[0], s[1], s[2]}, opts(torch::kUInt8));
  if (cache.skeleton()) r.skeleton = torch::empty({n, 1, s[0], s[1], s[2]}, opts(torch::kUInt8));
  if (const CacheField* d = cache.distance()) {
    r.distance = torch::empty({n, d->channel_count(), s[0], s[1], s[2]}, opts(resampled ? torch::kFloat : d->dtype));
  }
  r.plan = torch::empty({n, kPlanColumns}, opts(torch::kDouble));
  r.cases.assign(static_cast<size_t>(n), 0);
  return r;
}

void PatchSampler::fill_sample(const SamplePlan& p, RawBatch& out, int64_t b) const {
  const StackedCache& cache = *cache_;
  const int64_t ci = p.case_index;
  if (!fault_case_.empty() && cache.id(ci) == fault_case_) {
    throw DataError("injected fault (U3D_TEST_FAULTS sampler_case)");
  }
  const Interp image_interp = p.affine || p.elastic ? Interp::kLinear : Interp::kNearest;
  std::vector<float> pad;
  const auto& fields = cache.image_fields();
  for (size_t f = 0; f < fields.size(); ++f) {
    torch::Tensor dst = out.images[f][b];
    const torch::Tensor src = cache.view(fields[f], ci);
    pad.clear();
    const int64_t channels = cache.in_channels();
    for (int64_t c : fields[f].channels) {
      const float sub = cache.norm_sub().data_ptr<float>()[ci * channels + c];
      const float div = cache.norm_div().data_ptr<float>()[ci * channels + c];
      pad.push_back(static_cast<float>(options_.pad_value) * div + sub);  // pad_value in raw units
    }
    resample_patch(src, p.transform, image_interp, pad.data(), dst);
  }
  if (cache.target()) {
    torch::Tensor dst = out.target[b];
    resample_patch(cache.view(*cache.target(), ci), p.transform, cache.segmentation() ? Interp::kNearest : image_interp,
                   nullptr, dst);
  }
  if (cache.mask()) {
    torch::Tensor dst = out.mask[b];
    resample_patch(cache.view(*cache.mask(), ci), p.transform, Interp::kNearest, nullptr, dst);
  }
  if (cache.skeleton()) {  // nearest, as the labels: a skeleton voxel of class k lands on a label k
    torch::Tensor dst = out.skeleton[b];
    resample_patch(cache.view(*cache.skeleton(), ci), p.transform, Interp::kNearest, nullptr, dst);
  }
  if (cache.distance()) {  // trilinear where resampled; 0 (neutral) outside the case
    torch::Tensor dst = out.distance[b];
    resample_patch(cache.view(*cache.distance(), ci), p.transform, image_interp, nullptr, dst);
  }
  double* row = out.plan.data_ptr<double>() + b * kPlanColumns;
  row[kPlanCase] = static_cast<double>(ci);
  row[kPlanScale] = p.scale;
  row[kPlanShift] = p.shift;
  row[kPlanGamma] = p.gamma;
  row[kPlanNoise] = p.noise_std;
  out.cases[static_cast<size_t>(b)] = ci;
}

void PatchSampler::fill_raw(int64_t epoch, int64_t step, RawBatch& out) const {
  if (!cache_->device().is_cpu()) {
    throw std::logic_error("PatchSampler::fill_raw: the cache is on the GPU; use DeviceSampler");
  }
  for (int64_t b = 0; b < options_.batch_size; ++b) {
    const SamplePlan p = plan(epoch, (step * options_.shards + options_.shard) * options_.batch_size + b);
    try {
      fill_sample(p, out, b);
    } catch (const std::exception& e) {
      if (host_allocation_failure(e)) throw;  // main() says "out of host memory", never the allocator's text
      throw DataError(fmt::format("case '{}': {}", cache_->id(p.case_index), error_line(e)));
    }
  }
  out.epoch = epoch;
  out.step = step;
}

RawBatch PatchSampler::raw_batch(int64_t epoch, int64_t step) const {
  RawBatch r = allocate_raw();
  fill_raw(epoch, step, r);
  return r;
}

namespace {

// `make` called with the arguments of sampler s's BatchFinalizer: a finalizer holds a mutex and
// neither copies nor moves, so the value and the owned one are each made in place from them.
template <class Make>
auto with_finalizer_arguments(const PatchSampler& s, const Make& make) {
  return make(s.cache(), s.options().augment, s.intensity_channels(), s.options().seed,
              s.options().channels_last_images ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::Contiguous);
}

}  // namespace

BatchFinalizer PatchSampler::finalizer() const {
  return with_finalizer_arguments(*this, [](const auto&... a) { return BatchFinalizer(a...); });
}

std::unique_ptr<BatchFinalizer> PatchSampler::new_finalizer() const {
  return with_finalizer_arguments(*this, [](const auto&... a) { return std::make_unique<BatchFinalizer>(a...); });
}

Batch PatchSampler::batch(int64_t epoch, int64_t step) const { return finalizer()(raw_batch(epoch, step)); }

Sample PatchSampler::sample(int64_t epoch, int64_t index, int64_t* case_index) const {
  // A batch of one at this sample's index: every draw is the sample's own.
  RawBatch r = allocate_raw();
  for (auto& t : r.images) t = t.narrow(0, 0, 1);
  if (r.target.defined()) r.target = r.target.narrow(0, 0, 1);
  if (r.mask.defined()) r.mask = r.mask.narrow(0, 0, 1);
  if (r.skeleton.defined()) r.skeleton = r.skeleton.narrow(0, 0, 1);
  if (r.distance.defined()) r.distance = r.distance.narrow(0, 0, 1);
  r.plan = r.plan.narrow(0, 0, 1);
  r.cases.resize(1);
  const SamplePlan p = plan(epoch, index);
  fill_sample(p, r, 0);
  r.epoch = epoch;
  r.step = index;
  if (case_index) *case_index = p.case_index;
  const Batch b = finalizer()(r);
  return Sample{b.image[0], b.target.defined() ? b.target[0] : torch::Tensor(),
                b.mask.defined() ? b.mask[0] : torch::Tensor()};
}

}  // namespace u3d
