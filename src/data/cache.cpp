#include "u3d/data/cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "compact_case.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/parallel.h"
#include "u3d/core/run.h"
#include "u3d/core/signals.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

using Clock = std::chrono::steady_clock;
using namespace cache_detail;  // the compact case form (compact_case.h)

// parallel_for (parallel.h) on worker threads only, each with one intra-op thread (the workers are
// the parallelism; the caller keeps its own setting), stopping at the first failure; a stop signal
// (core/signals.h) ends the load before the next case with a StoppedError. A host
// allocation that fails while loading (LibTorch's allocator, std::bad_alloc) is a DataError naming
// the settings that shrink the load, never the allocator's text.
template <class Fn>
void parallel_items(int64_t n, int64_t threads, Fn&& fn) {
  try {
    parallel_for(
        n, threads,
        [&](int64_t i) {
          if (const int signal = StopSignals::pending()) {
            throw StoppedError(fmt::format("stopped by {} while loading the data", StopSignals::name(signal)), signal);
          }
          use_one_intra_op_thread();
          fn(i);
        },
        OnError::kStopEarly, /*caller_works=*/false);
  } catch (const std::exception& e) {
    const auto bytes = host_allocation_failure(e);
    if (!bytes) throw;
    const int64_t available = host_available_bytes();
    throw DataError(fmt::format(
        "data: out of host memory while loading {} cases{} ({} available); use data.cache_float16: true, "
        "fewer or smaller cases, or a machine with more memory",
        n, *bytes > 0 ? fmt::format(" (an allocation of {} failed)", human_bytes(static_cast<double>(*bytes))) : "",
        available >= 0 ? human_bytes(static_cast<double>(available)) : "unknown"));
  }
}

torch::TensorOptions arena_options(torch::ScalarType dtype, CachePlacement placement, const torch::Device& device) {
  auto o = torch::TensorOptions().dtype(dtype);
  if (placement == CachePlacement::kGpu) return o.device(device);
  if (placement == CachePlacement::kPinned) return o.pinned_memory(true);
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TensorCache

TensorCache TensorCache::load(const DatasetReader& reader, const std::vector<std::string>& ids, const Preprocessor& pre,
                              int64_t threads, const CaseSource& read) {
  TensorCache cache;
  cache.cases_.resize(ids.size());
  const CaseSource source = source_or_reader(reader, read);
  parallel_items(static_cast<int64_t>(ids.size()), threads, [&](int64_t i) {
    CaseData raw = source(ids[static_cast<size_t>(i)]);
    CachedCase c;
    c.id = raw.id;
    c.spacing = raw.spacing;
    c.image = pre.image(raw.image);
    if (raw.target.defined()) {
      c.target = pre.target(raw.target);
      if (pre.task() == Task::kDose) c.raw_target = raw.target;
    }
    if (raw.mask.defined()) c.mask = raw.mask.unsqueeze(0);
    cache.cases_[static_cast<size_t>(i)] = std::move(c);
  });
  return cache;
}

bool TensorCache::has_targets() const {
  return !cases_.empty() &&
         std::all_of(cases_.begin(), cases_.end(), [](const CachedCase& c) { return c.target.defined(); });
}

bool TensorCache::has_masks() const {
  return !cases_.empty() &&
         std::all_of(cases_.begin(), cases_.end(), [](const CachedCase& c) { return c.mask.defined(); });
}

int64_t TensorCache::bytes() const {
  int64_t total = 0;
  for (const auto& c : cases_) {
    for (const auto* t : {&c.image, &c.target, &c.mask, &c.raw_target}) {
      if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
    }
  }
  return total;
}

double TensorCache::target_mean() const {
  double sum = 0, count = 0;
  for (const auto& c : cases_) {
    if (!c.raw_target.defined()) continue;
    if (c.mask.defined()) {
      const auto m = c.mask[0].to(torch::kBool);
      sum += c.raw_target.masked_select(m).sum().item<double>();
      count += static_cast<double>(m.sum().item<int64_t>());
    } else {
      sum += c.raw_target.sum().item<double>();
      count += static_cast<double>(c.raw_target.numel());
    }
  }
  return count > 0 ? sum / count : 0.0;
}

Shape3 TensorCache::min_shape() const {
  Shape3 s = {INT64_MAX, INT64_MAX, INT64_MAX};
  for (const auto& c : cases_) {
    for (int a = 0; a < 3; ++a) s[a] = std::min(s[a], c.image.size(a + 1));
  }
  return s;
}

StackedCache TensorCache::stack_shared(const LabelMapFn& label_maps, CachePlacement placement, const Shape3& pad_to) {
  CacheOptions options;
  options.label_maps = label_maps;
  options.placement = placement;
  std::vector<CachedCase> stacked = cases_;  // the same tensors, but padded copies of small cases
  std::vector<bool> padded(stacked.size(), false);
  for (size_t i = 0; i < stacked.size(); ++i) {
    CachedCase& c = stacked[i];
    const auto sizes = c.image.sizes();
    padded[i] = sizes[1] < pad_to[0] || sizes[2] < pad_to[1] || sizes[3] < pad_to[2];
    if (!padded[i]) continue;
    c.image = cache_detail::pad_centred(c.image, pad_to, 0.0).contiguous();
    for (torch::Tensor* t : {&c.target, &c.mask, &c.raw_target}) {
      if (t->defined()) *t = cache_detail::pad_centred(*t, pad_to, 0.0).contiguous();
    }
  }
  StackedCache s = StackedCache::from_cases(stacked, options, /*keep_float32=*/true);
  const CacheField& image = s.image_fields().front();
  for (int64_t i = 0; i < size(); ++i) {
    if (padded[static_cast<size_t>(i)]) continue;  // stacked as a padded copy: the case keeps its own
    CachedCase& c = cases_[static_cast<size_t>(i)];
    c.image = s.view(image, i);  // (C, D, H, W) float32
    if (c.target.defined()) {
      const torch::Tensor t = s.view(*s.target(), i);  // (1, D, H, W)
      c.target = c.target.dim() == 3 ? t[0] : t;
    }
    if (c.mask.defined() && s.mask()) c.mask = s.view(*s.mask(), i);
  }
  return s;
}

void TensorCache::pin_memory() {
  if (!torch::cuda::is_available()) return;
  for (CachedCase& c : cases_) {
    for (torch::Tensor* t : {&c.image, &c.target, &c.mask, &c.raw_target}) {
      if (t->defined() && !t->is_pinned()) *t = t->pin_memory();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// StackedCache

std::string CacheField::name() const {
  switch (kind) {
    case FieldKind::kTarget: return "target";
    case FieldKind::kMask: return "mask";
    case FieldKind::kSkeleton: return "skeleton";
    case FieldKind::kDistance: return "distance";
    default:
      return channels.size() == 1 ? fmt::format("image[channel {}]", channels[0])
                                  : fmt::format("image[{} channels]", channels.size());
  }
}

// Builds a StackedCache from loaded cases: dtypes per channel over all cases, arena allocation,
// parallel copy (each case's temporaries are released once copied).
class StackedCacheBuilder {
 public:
  static StackedCache build(std::vector<CompactCase>& cases, bool segmentation, double target_scale,
                            CachePlacement placement, const torch::Device& device, bool float16, int64_t threads,
                            int64_t available) {
    StackedCache s;
    s.placement_ = placement;
    s.device_ = placement == CachePlacement::kGpu ? device : torch::Device(torch::kCPU);
    s.segmentation_ = segmentation;
    s.target_scale_ = target_scale;
    const int64_t n = static_cast<int64_t>(cases.size());
    const int64_t channels = static_cast<int64_t>(cases.front().channels.size());
    s.in_channels_ = channels;
    s.offsets_.push_back(0);
    double target_sum = 0, target_count = 0;
    bool all_targets = true, all_masks = true, all_skeletons = true, all_distances = true;
    for (const auto& c : cases) {
      if (static_cast<int64_t>(c.channels.size()) != channels) {
        throw DataError(
            fmt::format("case '{}' has {} input channels; the others have {}", c.id, c.channels.size(), channels));
      }
      s.ids_.push_back(c.id);
      s.shapes_.push_back(c.shape);
      s.offsets_.push_back(s.offsets_.back() + voxels(c.shape));
      target_sum += c.target_sum;
      target_count += c.target_count;
      all_targets = all_targets && c.target.defined();
      all_masks = all_masks && c.mask.defined();
      all_skeletons = all_skeletons && c.skeleton.defined();
      all_distances = all_distances && c.distance.defined() && c.distance.size(0) == cases.front().distance.size(0);
    }
    s.target_mean_ = target_count > 0 ? target_sum / target_count : 0.0;
    const int64_t total = s.offsets_.back();

    // Channel dtypes: the widest kind any case needs.
    std::vector<int> kind(static_cast<size_t>(channels), kCompactUInt8);
    for (const auto& c : cases) {
      for (int64_t ch = 0; ch < channels; ++ch) {
        kind[static_cast<size_t>(ch)] = std::max(kind[static_cast<size_t>(ch)], c.kinds[static_cast<size_t>(ch)]);
      }
    }
    for (int k = kCompactUInt8; k <= kCompactFloat; ++k) {
      CacheField f;
      f.kind = FieldKind::kImage;
      f.dtype = compact_dtype(k, float16);
      for (int64_t ch = 0; ch < channels; ++ch) {
        if (kind[static_cast<size_t>(ch)] == k) f.channels.push_back(ch);
      }
      if (!f.channels.empty()) s.image_fields_.push_back(f);
    }
    if (all_targets) {
      s.target_.kind = FieldKind::kTarget;
      s.target_.dtype = segmentation ? torch::kUInt8 : (float16 ? torch::kHalf : torch::kFloat);
      s.target_.channels = {0};
    }
    if (all_masks) {
      s.mask_.kind = FieldKind::kMask;
      s.mask_.dtype = torch::kUInt8;
      s.mask_.channels = {0};
    }
    if (all_skeletons) {
      s.skeleton_.kind = FieldKind::kSkeleton;
      s.skeleton_.dtype = torch::kUInt8;
      s.skeleton_.channels = {0};
    }
    if (all_distances) {
      s.distance_.kind = FieldKind::kDistance;
      s.distance_.dtype = torch::kHalf;
      for (int64_t k = 0; k < cases.front().distance.size(0); ++k) s.distance_.channels.push_back(k);
    }
    int64_t needed = 0;
    std::vector<CacheField*> fields;
    for (auto& f : s.image_fields_) fields.push_back(&f);
    if (all_targets) fields.push_back(&s.target_);
    if (all_masks) fields.push_back(&s.mask_);
    if (all_skeletons) fields.push_back(&s.skeleton_);
    if (all_distances) fields.push_back(&s.distance_);
    for (auto* f : fields) needed += total * f->channel_count() * static_cast<int64_t>(c10::elementSize(f->dtype));
    try {
      for (auto* f : fields) {
        f->arena = torch::empty({total * f->channel_count()}, arena_options(f->dtype, placement, s.device_));
      }
    } catch (const std::exception& e) {
      throw DataError(
          fmt::format("data.cache: the training split needs {} of {} but it cannot be allocated ({} "
                      "available); use data.cache: memory, data.cache_float16: true or a smaller split",
                      human_bytes(static_cast<double>(needed)), placement_text(placement),
                      available >= 0 ? human_bytes(static_cast<double>(available)) : "unknown"));
    }

    // Normalisation tables and the copy into the arena.
    s.norm_sub_ = torch::empty({n, channels}, torch::kFloat);
    s.norm_div_ = torch::empty({n, channels}, torch::kFloat);
    parallel_items(n, threads, [&](int64_t i) {
      CompactCase& c = cases[static_cast<size_t>(i)];
      std::copy(c.sub.begin(), c.sub.end(), s.norm_sub_.data_ptr<float>() + i * channels);
      std::copy(c.div.begin(), c.div.end(), s.norm_div_.data_ptr<float>() + i * channels);
      for (const auto& f : s.image_fields_) {
        const torch::Tensor dst = s.view(f, i);  // (Cf, D, H, W)
        for (int64_t k = 0; k < f.channel_count(); ++k) {
          dst[k].copy_(c.channels[static_cast<size_t>(f.channels[static_cast<size_t>(k)])]);
        }
      }
      if (s.target()) s.view(s.target_, i)[0].copy_(c.target);
      if (s.mask()) s.view(s.mask_, i)[0].copy_(c.mask);
      if (s.skeleton()) s.view(s.skeleton_, i)[0].copy_(c.skeleton);
      if (s.distance()) s.view(s.distance_, i).copy_(c.distance);
      c = CompactCase{};  // release the temporaries
    });
    return s;
  }
};

StackedCache StackedCache::load(const DatasetReader& reader, const std::vector<std::string>& ids,
                                const Preprocessor& pre, const CacheOptions& options) {
  if (ids.empty()) throw ConfigError("data: the training split holds no cases");
  const auto t0 = Clock::now();
  // Fit check before reading everything: the first case's dtypes times every case's size. A pinned
  // cache briefly needs twice that in RAM while loading (pageable temporaries + page-locked arena).
  const CaseSource read = source_or_reader(reader, options.read);
  std::vector<CompactCase> cases(ids.size());
  cases[0] = compact_case(read, ids[0], pre, options.float16);  // read once: kept for the arena
  pad_case(cases[0], options.pad_to);
  add_label_maps(cases[0], options.label_maps);
  const int64_t estimate = estimate_from(cases[0], reader, ids, options.float16);
  CachePlacement placement = resolve_placement(options.placement, options.gpu_share, options.device, estimate);
  if (placement == CachePlacement::kPinned && !torch::cuda::is_available()) {
    spdlog::warn(
        "data.cache: pinned needs CUDA (the CUDA driver allocates page-locked memory) and no CUDA device "
        "is available; the cache is kept in ordinary memory");
    placement = CachePlacement::kMemory;
  }
  if (placement == CachePlacement::kGpu && (!torch::cuda::is_available() || !options.device.is_cuda())) {
    throw ConfigError("data.cache: gpu needs a CUDA device and none is available; use auto, pinned or memory");
  }
  int64_t available = available_bytes(placement, options.device);
  if (options.limit_bytes >= 0)
    available = available < 0 ? options.limit_bytes : std::min(available, options.limit_bytes);
  const int64_t host_need = placement == CachePlacement::kPinned ? 2 * estimate : estimate;
  const int64_t need = placement == CachePlacement::kGpu ? estimate : host_need;
  if (available >= 0 && need > available) {
    const int64_t map_bytes =
        (cases[0].skeleton.defined() ? 1 : 0) + (cases[0].distance.defined() ? 2 * cases[0].distance.size(0) : 0);
    throw DataError(fmt::format(
        "data.cache: the training split ({} cases) needs about {} in {}{} but only {} is available; use {}{}"
        "data.cache_float16: true, fewer cases, or a machine with more memory",
        ids.size(), human_bytes(static_cast<double>(need)), placement_text(placement),
        placement == CachePlacement::kPinned ? " while loading" : "", human_bytes(static_cast<double>(available)),
        placement == CachePlacement::kGpu ? "data.cache: pinned, " : "",
        map_bytes > 0 ? fmt::format("training.cache_truth_maps: false ({} bytes a voxel of maps), ", map_bytes) : ""));
  }
  const auto t_read = Clock::now();
  parallel_items(static_cast<int64_t>(ids.size()) - 1, options.threads, [&](int64_t k) {
    const size_t i = static_cast<size_t>(k) + 1;
    cases[i] = compact_case(read, ids[i], pre, options.float16);
    pad_case(cases[i], options.pad_to);
    add_label_maps(cases[i], options.label_maps);
  });
  const int64_t padded = std::count_if(cases.begin(), cases.end(), [](const CompactCase& c) { return c.padded; });
  if (padded > 0) {
    spdlog::info(
        "data.cache: {} of {} cases are smaller than the patch {} on an axis: padded up to it, centred "
        "(images with 0 once normalised, targets and masks with 0), as nnU-Net pads them",
        padded, ids.size(), shape_text(std::vector<int64_t>(options.pad_to.begin(), options.pad_to.end())));
  }
  double reading = 0, maps = 0;
  for (const auto& c : cases) {
    reading += c.read_seconds;
    maps += c.maps_seconds;
  }
  const double decoding = std::chrono::duration<double>(Clock::now() - t_read).count();
  const auto t_build = Clock::now();
  const double target_scale = pre.task() == Task::kDose ? pre.target_scale() : 1.0;
  StackedCache s = StackedCacheBuilder::build(cases, pre.task() == Task::kSegmentation, target_scale, placement,
                                              options.device, options.float16, options.threads, available);
  s.load_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  spdlog::info(
      "data.cache: {} cases with {} thread{}: size estimate {:.1f} s, reading and converting {:.1f} s "
      "(HDF5 reads {:.1f} s{} summed over threads), arena {:.1f} s",
      ids.size(), options.threads, options.threads == 1 ? "" : "s", std::chrono::duration<double>(t_read - t0).count(),
      decoding, reading, options.label_maps ? fmt::format(", ground-truth maps {:.1f} s", maps) : "",
      std::chrono::duration<double>(Clock::now() - t_build).count());
  return s;
}

StackedCache StackedCache::from_cases(const std::vector<CachedCase>& in, const CacheOptions& options,
                                      bool keep_float32) {
  if (in.empty()) throw ConfigError("data: the training split holds no cases");
  std::vector<CompactCase> cases;
  bool segmentation = false;
  double sum = 0, count = 0;
  for (const auto& c : in) {
    CompactCase l;
    l.id = c.id;
    const torch::Tensor image = c.image.to(torch::kCPU, torch::kFloat).contiguous();
    l.shape = {image.size(1), image.size(2), image.size(3)};
    for (int64_t ch = 0; ch < image.size(0); ++ch) {
      const torch::Tensor v = image[ch].contiguous();
      const int kind = keep_float32 ? kCompactFloat : compact_kind(v);
      l.kinds.push_back(kind);
      l.channels.push_back(v.to(compact_dtype(kind, options.float16 && !keep_float32)));
      l.sub.push_back(0.0f);
      l.div.push_back(1.0f);
    }
    if (c.target.defined()) {
      segmentation = c.target.scalar_type() == torch::kUInt8;
      l.target = segmentation ? c.target.cpu()
                              : c.target.cpu().to(torch::kFloat).reshape({l.shape[0], l.shape[1], l.shape[2]});
    }
    if (c.mask.defined()) l.mask = c.mask.cpu().to(torch::kUInt8).reshape({l.shape[0], l.shape[1], l.shape[2]});
    add_label_maps(l, options.label_maps);
    if (c.raw_target.defined()) {
      const torch::Tensor m = c.mask.defined() ? l.mask.to(torch::kBool) : torch::ones_like(c.raw_target, torch::kBool);
      sum += c.raw_target.masked_select(m).sum(torch::kDouble).item<double>();
      count += static_cast<double>(m.sum().item<int64_t>());
    }
    cases.push_back(std::move(l));
  }
  CachePlacement placement = options.placement == CachePlacement::kAuto ? CachePlacement::kMemory : options.placement;
  if (placement == CachePlacement::kPinned && !torch::cuda::is_available()) placement = CachePlacement::kMemory;
  StackedCache s = StackedCacheBuilder::build(cases, segmentation, 1.0, placement, options.device,
                                              options.float16 && !keep_float32, options.threads, -1);
  s.target_mean_ = count > 0 ? sum / count : 0.0;
  return s;
}

bool StackedCache::uniform_shape() const {
  return std::all_of(shapes_.begin(), shapes_.end(), [&](const Shape3& s) { return s == shapes_.front(); });
}

Shape3 StackedCache::min_shape() const {
  Shape3 m = {INT64_MAX, INT64_MAX, INT64_MAX};
  for (const auto& s : shapes_) {
    for (int a = 0; a < 3; ++a) m[a] = std::min(m[a], s[a]);
  }
  return m;
}

torch::Tensor StackedCache::view(const CacheField& field, int64_t i) const {
  const Shape3& s = shapes_[static_cast<size_t>(i)];
  return planes(field).narrow(1, offsets_[static_cast<size_t>(i)], voxels(s)).view({-1, s[0], s[1], s[2]});
}

torch::Tensor StackedCache::planes(const CacheField& field) const {
  return field.arena.view({field.channel_count(), -1});
}

torch::Tensor StackedCache::stacked(const CacheField& field) const {
  if (!uniform_shape() || shapes_.empty()) return torch::Tensor();
  return field.arena.view({field.channel_count(), size(), shape(0)[0], shape(0)[1], shape(0)[2]}).transpose(0, 1);
}

torch::Tensor StackedCache::channel(int64_t i, int64_t c) const {
  for (const auto& f : image_fields_) {
    const auto it = std::find(f.channels.begin(), f.channels.end(), c);
    if (it != f.channels.end()) return view(f, i)[it - f.channels.begin()];
  }
  throw std::out_of_range(fmt::format("StackedCache::channel: no input channel {}", c));
}

int64_t StackedCache::bytes() const {
  int64_t total = 0;
  for (const auto& f : image_fields_) total += f.arena.numel() * static_cast<int64_t>(f.arena.element_size());
  for (const auto* f : {&target_, &mask_, &skeleton_, &distance_}) {
    if (f->arena.defined()) total += f->arena.numel() * static_cast<int64_t>(f->arena.element_size());
  }
  return total;
}

std::string StackedCache::describe() const {
  std::vector<std::string> parts;
  for (const auto& f : image_fields_) parts.push_back(fmt::format("{} {}", f.name(), dtype_name(f.dtype)));
  if (target()) parts.push_back(fmt::format("target {}", dtype_name(target_.dtype)));
  if (mask()) parts.push_back(fmt::format("mask {}", dtype_name(mask_.dtype)));
  if (skeleton()) parts.push_back(fmt::format("skeleton {}", dtype_name(skeleton_.dtype)));
  if (distance())
    parts.push_back(fmt::format("distance[{}] {}", distance_.channel_count(), dtype_name(distance_.dtype)));
  return fmt::format("{} cases, {} in {} ({}){}, loaded in {:.1f} s", size(), human_bytes(static_cast<double>(bytes())),
                     placement_text(placement_), fmt::join(parts, ", "),
                     uniform_shape() ? fmt::format(", stacked ({}, C, {}, {}, {})", size(), shapes_.front()[0],
                                                   shapes_.front()[1], shapes_.front()[2])
                                     : ", per-case arena (sizes differ)",
                     load_seconds_);
}

}  // namespace u3d
