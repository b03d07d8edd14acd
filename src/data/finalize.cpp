#include "u3d/data/finalize.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>

#include "dtype_dispatch.h"
#include "u3d/core/rng.h"
#include "u3d/data/preprocess.h"

namespace u3d {
namespace {

// CPU: out[b, channels[k]] = (float(field[b, k]) - sub[case_b, c]) / div[case_b, c] in one pass over
// the data, the same float32 operations (and so the same bits) as the tensor expression.
template <typename T>
void normalize_field(const torch::Tensor& field, const std::vector<int64_t>& channels,
                     const std::vector<int64_t>& cases, const float* sub, const float* div, int64_t in_channels,
                     torch::Tensor& out) {
  const int64_t n = field.size(0), cf = field.size(1), voxels = field[0][0].numel();
  const T* src = field.data_ptr<T>();
  float* dst = out.data_ptr<float>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t k = 0; k < cf; ++k) {
      const int64_t c = channels[static_cast<size_t>(k)];
      const float s = sub[cases[static_cast<size_t>(b)] * in_channels + c],
                  d = div[cases[static_cast<size_t>(b)] * in_channels + c];
      const T* in = src + (b * cf + k) * voxels;
      float* o = dst + (b * in_channels + c) * voxels;
      for (int64_t v = 0; v < voxels; ++v) o[v] = normalize_value(static_cast<float>(in[v]), s, d);
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

BatchFinalizer::BatchFinalizer(const StackedCache& cache, const AugmentConfig& augment,
                               std::vector<int64_t> intensity_channels, uint64_t seed, at::MemoryFormat image_format)
    : cache_(cache),
      augment_(augment),
      intensity_channels_(std::move(intensity_channels)),
      seed_(seed),
      image_format_(image_format) {}

const BatchFinalizer::DeviceTables& BatchFinalizer::tables(const torch::Device& device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = tables_.find(device.str());
  if (it != tables_.end()) return it->second;
  DeviceTables t;
  t.sub = cache_.norm_sub().to(device);
  t.div = cache_.norm_div().to(device);
  for (const auto& f : cache_.image_fields())
    t.field_channels.push_back(torch::tensor(f.channels, torch::kLong).to(device));
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
        normalize_field<T>(field, fields[f].channels, cases, tb.sub.data_ptr<float>(), tb.div.data_ptr<float>(),
                           channels, b.image);
      });
    }
    if (image_format_ != at::MemoryFormat::Contiguous) b.image = b.image.contiguous(image_format_);
  } else if (raw.images.size() == 1) {
    b.image = torch::empty(shape, fopt.memory_format(image_format_));
    b.image.copy_(first);  // dtype and layout in one pass
  } else {
    b.image = torch::empty(shape, fopt.memory_format(image_format_));
    for (size_t f = 0; f < raw.images.size(); ++f) {
      b.image.index_copy_(1, tb.field_channels[f], raw.images[f].to(torch::kFloat));
    }
  }
  if (!device.is_cpu()) {
    const torch::Tensor cases = raw.plan.select(1, kPlanCase).to(torch::kLong);
    normalize_(b.image, tb.sub.index_select(0, cases).view({n, channels, 1, 1, 1}),
               tb.div.index_select(0, cases).view({n, channels, 1, 1, 1}));
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
    at::Generator gen = noise_generator(
        device, mix64(mix64(seed_ ^ 0x4E4F495345ull) ^ mix64(static_cast<uint64_t>(raw.epoch) * 0x9E3779B97F4A7C15ull +
                                                             static_cast<uint64_t>(raw.step))));
    b.image.add_(torch::randn(b.image.sizes(), gen, fopt).mul_(spread(std)));
  }

  if (raw.target.defined()) {
    if (cache_.segmentation()) {
      b.target = raw.target.squeeze(1).to(torch::kLong);  // (N, d, h, w)
    } else {
      b.target = scale_target(raw.target, cache_.target_scale());  // (N, 1, d, h, w)
    }
  }
  if (raw.mask.defined()) b.mask = raw.mask.to(torch::kFloat);
  if (raw.skeleton.defined()) b.maps.skeleton = raw.skeleton.squeeze(1);  // (N, d, h, w) uint8
  if (raw.distance.defined()) b.maps.distance = raw.distance.to(torch::kFloat);
  return b;
}

}  // namespace u3d
