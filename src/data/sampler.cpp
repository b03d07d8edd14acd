#include "u3d/sampler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>

#include "u3d/augment.h"
#include "u3d/errors.h"
#include "u3d/rng.h"

namespace u3d {
namespace {
constexpr uint64_t kShuffleStream = 0x5A3D1E0000000000ull;
}

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch b;
  b.image = image.to(device, non_blocking);
  b.target = target.to(device, non_blocking);
  if (mask.defined()) b.mask = mask.to(device, non_blocking);
  b.cases = cases;
  return b;
}

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
    const auto it = std::find(channel_names.begin(), channel_names.end(), name);
    if (it == channel_names.end()) {
      throw ConfigError(fmt::format("data.foreground: channel '{}' is not an input channel; they are: {}", name,
                                    fmt::join(channel_names, ", ")));
    }
    const torch::Tensor ch = c.image[it - channel_names.begin()];
    return ch > ch.min();
  }
  if (spec.rfind("labels:", 0) == 0) {
    if (!labels) throw ConfigError("data.foreground: labels:... needs a segmentation dataset");
    std::vector<int64_t> wanted;
    std::string list = spec.substr(7);
    for (size_t pos = 0; pos <= list.size();) {
      const size_t comma = list.find(',', pos);
      wanted.push_back(std::stoll(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return torch::isin(c.target.to(torch::kLong), torch::tensor(wanted, torch::kLong));
  }
  throw ConfigError(fmt::format("data.foreground: '{}' is not a foreground spec", spec));
}

PatchSampler::PatchSampler(const TensorCache& cache, SamplerOptions options) : cache_(cache), options_(options) {
  if (cache_.size() == 0) throw ConfigError("data: the training split holds no cases");
  for (const auto& c : cache_.cases()) {
    for (int a = 0; a < 3; ++a) {
      if (options_.patch[a] > c.image.size(a + 1)) {
        throw ConfigError(fmt::format(
            "data.patch_size: [{}, {}, {}] is larger than case '{}' ({}, {}, {}); use a patch no larger than the "
            "smallest volume",
            options_.patch[0], options_.patch[1], options_.patch[2], c.id, c.image.size(1), c.image.size(2),
            c.image.size(3)));
      }
    }
  }
  if (options_.foreground_fraction > 0) {
    for (int64_t i = 0; i < cache_.size(); ++i) {
      const CachedCase& c = cache_[i];
      torch::Tensor voxels = foreground_mask(c, options_.foreground, options_.channel_names).nonzero();  // (K, 3)
      if (voxels.size(0) == 0) {
        spdlog::warn("sampler: case '{}' has no foreground ({}); its foreground patches are drawn uniformly", c.id,
                     options_.foreground);
      } else if (voxels.size(0) > options_.max_foreground_voxels) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(mix64(options_.seed ^ mix64(static_cast<uint64_t>(i))));
        voxels = voxels.index_select(0, torch::randperm(voxels.size(0), gen, torch::kLong)
                                            .slice(0, 0, options_.max_foreground_voxels));
      }
      foreground_.push_back(voxels.contiguous());
    }
  }
}

int64_t PatchSampler::case_for(int64_t epoch, int64_t index) const {
  const int64_t n = cache_.size();
  const int64_t pass = index / n;
  // Fisher-Yates shuffle of 0..n-1 for this (epoch, pass).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(options_.seed, static_cast<uint64_t>(epoch), kShuffleStream + static_cast<uint64_t>(pass));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.uniform_int(i + 1))]);
  return order[static_cast<size_t>(index % n)];
}

Sample PatchSampler::sample(int64_t epoch, int64_t index, int64_t* case_index) const {
  const int64_t ci = case_for(epoch, index);
  if (case_index) *case_index = ci;
  const CachedCase& c = cache_[ci];
  Rng rng(options_.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
  std::array<int64_t, 3> origin{};
  const bool centred = options_.foreground_fraction > 0 && rng.bernoulli(options_.foreground_fraction) &&
                       foreground_[static_cast<size_t>(ci)].size(0) > 0;
  if (centred) {
    const torch::Tensor& fg = foreground_[static_cast<size_t>(ci)];
    const auto voxel = fg[rng.uniform_int(fg.size(0))];
    for (int a = 0; a < 3; ++a) {
      const int64_t hi = c.image.size(a + 1) - options_.patch[a];
      origin[a] = std::clamp<int64_t>(voxel[a].item<int64_t>() - options_.patch[a] / 2, 0, hi);
    }
  } else {
    for (int a = 0; a < 3; ++a) origin[a] = rng.uniform_int(c.image.size(a + 1) - options_.patch[a] + 1);
  }
  auto crop = [&](const torch::Tensor& t) {
    if (!t.defined()) return t;
    const int64_t first = t.dim() - 3;  // spatial axes are the last three
    torch::Tensor out = t;
    for (int a = 0; a < 3; ++a) out = out.narrow(first + a, origin[a], options_.patch[a]);
    return out;
  };
  Sample s{crop(c.image), crop(c.target), crop(c.mask)};
  if (options_.apply_augmentation) augment_sample(s, options_.augment, rng);
  return s;
}

Batch PatchSampler::batch(int64_t epoch, int64_t step) const {
  std::vector<torch::Tensor> images, targets, masks;
  Batch b;
  for (int64_t i = 0; i < options_.batch_size; ++i) {
    int64_t ci = 0;
    Sample s = sample(epoch, step * options_.batch_size + i, &ci);
    images.push_back(s.image);
    targets.push_back(s.target);
    if (s.mask.defined()) masks.push_back(s.mask);
    b.cases.push_back(ci);
  }
  b.image = torch::stack(images);                       // (N, C, d, h, w)
  b.target = torch::stack(targets);                     // (N, 1, d, h, w) float or (N, d, h, w) uint8
  if (b.target.scalar_type() == torch::kUInt8) b.target = b.target.to(torch::kLong);
  if (masks.size() == images.size()) b.mask = torch::stack(masks).to(torch::kFloat);
  return b;
}

}  // namespace u3d
