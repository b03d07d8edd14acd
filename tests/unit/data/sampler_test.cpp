#include <gtest/gtest.h>

#include <set>

#include "u3d/core/errors.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

// Five cases whose first image channel equals the target and whose values identify the case
// (case i lies in [10 i, 10 i + 1)), so any crop or flip must keep image and target aligned.
TensorCache aligned_cache() {
  torch::manual_seed(0);
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 5; ++i) {
    CachedCase c;
    c.id = "c" + std::to_string(i);
    const auto values = torch::rand({1, 12, 10, 14}) + static_cast<double>(i) * 10.0;
    c.image = torch::cat({values, values * 2});  // (2, D, H, W)
    c.target = values.clone();                   // (1, D, H, W)
    c.mask = (values > values.mean()).to(torch::kUInt8);
    cases.push_back(c);
  }
  return TensorCache(std::move(cases));
}

SamplerOptions sampler_options(double flip = 0.5) {
  SamplerOptions o;
  o.patch = {8, 8, 8};
  o.batch_size = 3;
  o.seed = 11;
  o.augment.flip_prob = flip;
  return o;
}

TEST(Sampler, BatchesAreAPureFunctionOfEpochAndStep) {
  const auto cache = aligned_cache();
  PatchSampler a(cache, sampler_options()), b(cache, sampler_options());
  const Batch x = a.batch(2, 1);
  (void)b.batch(0, 0);  // call order must not matter
  const Batch y = b.batch(2, 1);
  EXPECT_TRUE(torch::equal(x.image, y.image));
  EXPECT_TRUE(torch::equal(x.target, y.target));
  EXPECT_EQ(x.cases, y.cases);
  EXPECT_FALSE(torch::equal(x.image, a.batch(3, 1).image));
}

TEST(Sampler, ShapesAndDtypes) {
  const auto cache = aligned_cache();
  const Batch b = PatchSampler(cache, sampler_options()).batch(0, 0);
  EXPECT_EQ(b.image.sizes(), (torch::IntArrayRef{3, 2, 8, 8, 8}));
  EXPECT_EQ(b.target.sizes(), (torch::IntArrayRef{3, 1, 8, 8, 8}));
  EXPECT_EQ(b.mask.sizes(), (torch::IntArrayRef{3, 1, 8, 8, 8}));
  EXPECT_EQ(b.mask.scalar_type(), torch::kFloat);
}

// A channels-last network gets its images finished in ChannelsLast3d order (one pass on a GPU),
// with the same values; targets and masks keep their layout.
TEST(Sampler, ChannelsLastImagesHoldTheSameValues) {
  const auto cache = aligned_cache();
  SamplerOptions cl = sampler_options();
  cl.augment.intensity_prob = 1.0;  // the in-place intensity transforms keep the layout
  cl.augment.gamma_prob = 1.0;
  SamplerOptions plain = cl;
  cl.channels_last_images = true;
  const Batch a = PatchSampler(cache, plain).batch(1, 2);
  const Batch b = PatchSampler(cache, cl).batch(1, 2);
  EXPECT_TRUE(a.image.is_contiguous());
  EXPECT_TRUE(b.image.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_FALSE(b.image.is_contiguous());
  EXPECT_TRUE(torch::equal(a.image, b.image));
  EXPECT_TRUE(torch::equal(a.target, b.target));
}

TEST(Sampler, CropsAndFlipsKeepImageTargetAndCaseAligned) {
  const auto cache = aligned_cache();
  const PatchSampler s(cache, sampler_options(/*flip=*/0.5));
  for (int64_t step = 0; step < 10; ++step) {
    const Batch b = s.batch(1, step);
    EXPECT_TRUE(torch::equal(b.image.select(1, 0).unsqueeze(1), b.target));
    EXPECT_TRUE(torch::allclose(b.image.select(1, 1), b.image.select(1, 0) * 2));
    for (int64_t i = 0; i < 3; ++i) {
      const double lo = static_cast<double>(b.cases[static_cast<size_t>(i)]) * 10.0;
      EXPECT_GE(b.target[i].min().item<double>(), lo);
      EXPECT_LT(b.target[i].max().item<double>(), lo + 1.0);
    }
  }
}

TEST(Sampler, AlwaysFlippingMirrorsEveryAxis) {
  const auto cache = aligned_cache();
  SamplerOptions o = sampler_options(1.0);
  o.patch = {12, 10, 14};  // the whole volume: no crop
  o.batch_size = 1;
  const Batch b = PatchSampler(cache, o).batch(0, 0);
  const auto& c = cache[b.cases[0]];
  EXPECT_TRUE(torch::equal(b.target[0], torch::flip(c.target, {1, 2, 3})));
}

TEST(Sampler, EveryCaseOncePerPass) {
  const auto cache = aligned_cache();
  SamplerOptions o = sampler_options();
  o.batch_size = 5;
  const Batch b = PatchSampler(cache, o).batch(4, 0);
  EXPECT_EQ(std::set<int64_t>(b.cases.begin(), b.cases.end()).size(), 5u);
}

TEST(Sampler, ForegroundFractionCentresPatchesOnForeground) {
  // One voxel of foreground per case, in a corner region; patches of 4 in a 12x10x14 volume.
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 3; ++i) {
    CachedCase c;
    c.id = "f" + std::to_string(i);
    c.image = torch::zeros({1, 12, 10, 14});
    c.target = torch::zeros({12, 10, 14}, torch::kUInt8);
    c.target[10][1][12] = 2;
    cases.push_back(c);
  }
  CachedCase empty;
  empty.id = "empty";
  empty.image = torch::zeros({1, 12, 10, 14});
  empty.target = torch::zeros({12, 10, 14}, torch::kUInt8);
  cases.push_back(empty);
  const TensorCache cache(std::move(cases));
  SamplerOptions o;
  o.patch = {4, 4, 4};
  o.batch_size = 4;
  o.augment.flip_prob = 0;
  o.foreground_fraction = 1.0;
  const PatchSampler always(cache, o);
  for (int64_t step = 0; step < 5; ++step) {
    const Batch b = always.batch(0, step);
    for (int64_t i = 0; i < 4; ++i) {
      const bool has_fg = (b.target[i] == 2).any().item<bool>();
      EXPECT_EQ(has_fg, b.cases[static_cast<size_t>(i)] != 3) << "case " << b.cases[static_cast<size_t>(i)];
    }
  }
  o.foreground_fraction = 0.0;
  const PatchSampler never(cache, o);
  int64_t hits = 0;
  for (int64_t step = 0; step < 20; ++step) hits += (never.batch(0, step).target == 2).any().item<bool>() ? 1 : 0;
  EXPECT_LT(hits, 10);  // uniform crops of 4^3 rarely reach one corner voxel
  // A channel spec that names no input channel is a config error.
  o.foreground_fraction = 0.5;
  o.foreground = "channel:ptv";
  o.channel_names = {"ct"};
  EXPECT_THROW(PatchSampler(cache, o), ConfigError);
}

TEST(Sampler, PatchLargerThanACaseIsAConfigError) {
  const auto cache = aligned_cache();
  SamplerOptions o = sampler_options();
  o.patch = {16, 8, 8};
  try {
    PatchSampler s(cache, o);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than case 'c0' (12, 10, 14)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace u3d
