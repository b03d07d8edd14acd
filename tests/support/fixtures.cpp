#include "fixtures.h"

#include <fmt/format.h>

#include "u3d/core/stats.h"

namespace u3d::test {

std::vector<CachedCase> random_cases(const std::string& prefix, int64_t count, const Shape3& shape, uint64_t seed,
                                     int64_t labels, bool top_label_ignored) {
  torch::manual_seed(seed);
  std::vector<CachedCase> out;
  const auto [depth, h, w] = shape;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t d = i % 2 ? depth + 2 : depth;
    CachedCase c;
    c.id = prefix + std::to_string(i);
    c.image = torch::cat({torch::randint(0, 9, {1, d, h, w}).to(torch::kFloat), torch::randn({1, d, h, w})});
    if (labels > 0) {
      c.target = torch::randint(0, labels, {d, h, w}).to(torch::kUInt8);
      if (top_label_ignored) c.target.masked_fill_(c.target == labels - 1, 255);
    } else {
      c.target = torch::rand({1, d, h, w});
    }
    c.mask = (torch::rand({1, d, h, w}) > 0.3).to(torch::kUInt8);
    out.push_back(c);
  }
  return out;
}

SamplerOptions flip_rot_sampler(const Shape3& patch, int64_t batch_size, uint64_t seed) {
  SamplerOptions o;
  o.augment.flip_prob = o.augment.rot90_prob = 0.5;
  o.patch = patch;
  o.batch_size = batch_size;
  o.seed = seed;
  return o;
}

void set_elastic(SamplerOptions& o, double prob, double magnitude, int64_t grid) {
  o.augment.elastic_prob = prob;
  o.augment.elastic_magnitude = magnitude;
  o.augment.elastic_grid = grid;
}

DataConfig dose_data() {
  DataConfig d;
  d.normalize = {"clip:-1000:1000", "none", "none", "none", "none"};
  d.target_scale = 70;
  return d;
}

DatasetFingerprint synthetic_fingerprint(const Shape3& shape, const std::vector<std::array<double, 3>>& spacings) {
  DatasetFingerprint fp;
  fp.task = Task::kSegmentation;
  fp.channel_names = {"CT"};
  fp.num_classes = 3;
  fp.splits = {{"train", static_cast<int64_t>(spacings.size())}};
  ChannelFingerprint ch;
  ch.name = "CT";
  ch.mean = 80;
  ch.std = 40;
  ch.p00_5 = -900;
  ch.p99_5 = 1500;
  fp.channels = {ch};
  for (size_t i = 0; i < spacings.size(); ++i) fp.cases.push_back({fmt::format("c{}", i), shape, spacings[i]});
  for (int a = 0; a < 3; ++a) {
    std::vector<double> s;
    for (const auto& sp : spacings) s.push_back(sp[a]);
    fp.median_spacing[a] = percentile(s, 50.0);
  }
  fp.median_shape = shape;
  fp.total_voxels = static_cast<int64_t>(spacings.size()) * shape[0] * shape[1] * shape[2];
  return fp;
}

ModelConfig unet_config(int64_t levels, int64_t base_filters) {
  ModelConfig m;
  m.levels = levels;
  m.base_filters = base_filters;
  return m;
}

SlidingWindowOptions window(const Shape3& patch, int64_t batch_size, bool mirror) {
  SlidingWindowOptions o;
  o.patch = patch;
  o.batch_size = batch_size;
  o.mirror = mirror;
  return o;
}

DatasetInfo segmentation_info(const std::vector<std::string>& channel_names,
                              const std::vector<std::string>& class_names) {
  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.channel_names = channel_names;
  info.num_classes = static_cast<int64_t>(class_names.size());
  info.class_names = class_names;
  return info;
}

PhantomOptions surface_phantom(int64_t cases, int64_t size) {
  PhantomOptions o;
  o.task = Task::kSegmentation;
  o.kind = PhantomKind::kSurface;
  o.cases = cases;
  o.size = {size, size, size};
  return o;
}

void phantom_with_configs(const TempDir& dir, int64_t cases, int64_t size, const std::vector<std::string>& names) {
  make_phantom(dir / "p.h5", Task::kDose, cases, size);
  for (const auto& name : names) write_text(dir / (name + ".yaml"), tiny_config("p.h5", name));
}

std::string PhantomCli::config(const std::string& name) {
  write_text(dir / (name + ".yaml"), tiny_config("p.h5", name));
  return name + ".yaml";
}

CommandResult PhantomCli::train(const std::string& name, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--config", config(name)};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_trainer(args, dir.path());
}

}  // namespace u3d::test
