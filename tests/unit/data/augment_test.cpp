// Augmentation definitions against hand-computed cases: mirrored index grids, 90-degree rotations of
// known volumes, identity and linear-field affines, integer labels, and the batched intensity
// transforms.
#include <gtest/gtest.h>

#include <set>

#include "u3d/data/augment.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

torch::Tensor index_grid(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return torch::arange(n, torch::kFloat).reshape(shape);
}

torch::Tensor resample(const torch::Tensor& src, const PatchTransform& t, Interp interp, torch::ScalarType out) {
  torch::Tensor dst = torch::empty({src.size(0), t.patch[0], t.patch[1], t.patch[2]}, out);
  resample_patch(src, t, interp, nullptr, dst);
  return dst;
}

TEST(Augment, MirrorOfAnIndexGrid) {
  const auto src = index_grid({2, 5, 6, 7});
  for (int mask = 0; mask < 8; ++mask) {
    const std::array<bool, 3> axes = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    std::vector<int64_t> dims;
    for (int a = 0; a < 3; ++a) {
      if (axes[static_cast<size_t>(a)]) dims.push_back(a + 1);
    }
    const PatchTransform t{{0, 0, 0}, {5, 6, 7}, flip_matrix(axes)};
    EXPECT_TRUE(torch::equal(resample(src, t, Interp::kNearest, torch::kFloat), dims.empty() ? src : src.flip(dims)))
        << mask;
  }
  // A crop at an origin, mirrored along W, in every cache dtype.
  for (const auto dtype : {torch::kUInt8, torch::kInt16, torch::kHalf, torch::kFloat}) {
    const auto grid = (index_grid({1, 8, 8, 8}).remainder(200)).to(dtype);
    const PatchTransform t{{1, 2, 3}, {4, 4, 4}, flip_matrix({false, false, true})};
    const auto expected = grid.slice(1, 1, 5).slice(2, 2, 6).slice(3, 3, 7).flip({3});
    EXPECT_TRUE(torch::equal(resample(grid, t, Interp::kNearest, dtype), expected)) << dtype;
    // With a float32 destination (affine enabled for the batch) the copy converts exactly.
    EXPECT_TRUE(torch::equal(resample(grid, t, Interp::kNearest, torch::kFloat), expected.to(torch::kFloat)));
    // Long rows (reversed 8 bytes at a time, then a tail).
    const auto wide = (index_grid({2, 3, 2, 37}).remainder(251)).to(dtype);
    const PatchTransform w{{0, 0, 0}, {3, 2, 37}, flip_matrix({false, true, true})};
    EXPECT_TRUE(torch::equal(resample(wide, w, Interp::kNearest, dtype), wide.flip({2, 3}))) << dtype;
  }
}

TEST(Augment, Rot90OfAKnownVolume) {
  // [[1, 2], [3, 4]] in the (H, W) plane rotated once: [[2, 4], [1, 3]] (as numpy/torch rot90).
  const auto small = torch::tensor({1.f, 2.f, 3.f, 4.f}).reshape({1, 1, 2, 2});
  const PatchTransform once{{0, 0, 0}, {1, 2, 2}, rot90_matrix(1, 1, 2)};
  EXPECT_TRUE(torch::equal(resample(small, once, Interp::kNearest, torch::kFloat),
                           torch::tensor({2.f, 4.f, 1.f, 3.f}).reshape({1, 1, 2, 2})));
  const auto cube = index_grid({1, 5, 5, 5});
  for (const auto& [a, b] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 2}, {1, 2}, {2, 1}}) {
    for (int64_t k = 0; k < 4; ++k) {
      const PatchTransform t{{0, 0, 0}, {5, 5, 5}, rot90_matrix(k, a, b)};
      EXPECT_TRUE(
          torch::equal(resample(cube, t, Interp::kNearest, torch::kFloat), torch::rot90(cube, k, {a + 1, b + 1})))
          << "k " << k << " plane " << a << "," << b;
    }
  }
}

TEST(Augment, IdentityAffineChangesNothing) {
  const Matrix3 identity = affine_matrix({0, 0, 0}, 1.0);
  EXPECT_TRUE(is_signed_permutation(identity));
  const auto src = torch::rand({3, 6, 7, 8});
  // Through the resampling kernel (a matrix a hair away from the identity is not a permutation).
  Matrix3 near = identity;
  for (auto& v : near) v *= 1 + 1e-12;
  ASSERT_FALSE(is_signed_permutation(near));
  const PatchTransform t{{1, 1, 1}, {4, 5, 6}, near};
  const auto crop = src.slice(1, 1, 5).slice(2, 1, 6).slice(3, 1, 7);
  EXPECT_TRUE(torch::allclose(resample(src, t, Interp::kLinear, torch::kFloat), crop, 1e-5, 1e-6));
  EXPECT_TRUE(torch::equal(resample(src, t, Interp::kNearest, torch::kFloat), crop));
}

TEST(Augment, AffineRotationBy90DegreesIsARot90) {
  const auto cube = torch::rand({2, 7, 7, 7});
  // About the D axis: source_H = -u_W, source_W = u_H, which is rot90 by -1 (k = 3) in (H, W).
  const PatchTransform t{{0, 0, 0}, {7, 7, 7}, affine_matrix({90, 0, 0}, 1.0)};
  ASSERT_FALSE(is_signed_permutation(t.matrix));  // cos(90 degrees) is not exactly 0
  EXPECT_TRUE(
      torch::allclose(resample(cube, t, Interp::kLinear, torch::kFloat), torch::rot90(cube, 3, {2, 3}), 1e-4, 1e-5));
}

TEST(Augment, TrilinearResamplingIsExactForLinearFields) {
  // f = 1 + 2 z + 3 y + 5 x: trilinear interpolation reproduces it wherever all 8 taps are inside.
  const int64_t n = 14;
  auto z = torch::arange(n, torch::kFloat).view({n, 1, 1}), y = z.view({1, n, 1}), x = z.view({1, 1, n});
  const auto field = (1 + 2 * z + 3 * y + 5 * x).unsqueeze(0).contiguous();  // (1, n, n, n)
  const PatchTransform t{{4, 4, 4}, {6, 6, 6}, affine_matrix({20, -10, 35}, 1.2)};
  const auto out = resample(field, t, Interp::kLinear, torch::kFloat);
  const auto& m = t.matrix;
  int64_t checked = 0;
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      for (int64_t k = 0; k < 6; ++k) {
        const double u[3] = {i - 2.5, j - 2.5, k - 2.5};
        double q[3];
        for (int a = 0; a < 3; ++a) q[a] = 6.5 + m[a * 3] * u[0] + m[a * 3 + 1] * u[1] + m[a * 3 + 2] * u[2];
        if (q[0] < 0 || q[1] < 0 || q[2] < 0 || q[0] > n - 1 || q[1] > n - 1 || q[2] > n - 1) continue;
        EXPECT_NEAR(out[0][i][j][k].item<double>(), 1 + 2 * q[0] + 3 * q[1] + 5 * q[2], 2e-3);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 216);  // a 6^3 patch rotated about the centre of a 14^3 volume stays inside
}

TEST(Augment, LabelsAndMasksStayIntegerUnderAffine) {
  std::vector<CachedCase> cases;
  torch::manual_seed(2);
  for (int64_t i = 0; i < 3; ++i) {
    CachedCase c;
    c.id = "s" + std::to_string(i);
    c.image = torch::randn({1, 12, 12, 12});
    c.target = torch::randint(0, 4, {12, 12, 12}).to(torch::kUInt8);
    c.mask = torch::randint(0, 2, {1, 12, 12, 12}).to(torch::kUInt8);
    cases.push_back(c);
  }
  const StackedCache cache = StackedCache::from_cases(cases);
  SamplerOptions o;
  o.patch = {8, 8, 8};
  o.batch_size = 3;
  o.augment.affine_prob = 1.0;
  o.augment.affine_rotation = {40, 40, 40};
  o.augment.affine_scale = {0.6, 1.5};
  o.pad_value = -7;
  const PatchSampler sampler(cache, o);
  bool padded = false;
  for (int64_t step = 0; step < 6; ++step) {
    const Batch b = sampler.batch(0, step);
    ASSERT_EQ(b.target.scalar_type(), torch::kLong);
    EXPECT_EQ(b.target.sizes(), (torch::IntArrayRef{3, 8, 8, 8}));
    EXPECT_GE(b.target.min().item<int64_t>(), 0);
    EXPECT_LE(b.target.max().item<int64_t>(), 3);
    EXPECT_TRUE(torch::logical_or(b.mask == 0, b.mask == 1).all().item<bool>());
    // pad_value where the patch leaves the volume
    padded = padded || ((b.image + 7).abs() < 1e-4).any().item<bool>();
  }
  EXPECT_TRUE(padded);
}

// Two channels, values known: intensity transforms touch only the chosen channel.
StackedCache two_channel_cache() {
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 2; ++i) {
    CachedCase c;
    c.id = "c" + std::to_string(i);
    c.image = torch::cat({torch::rand({1, 6, 6, 6}) + static_cast<double>(i), torch::rand({1, 6, 6, 6})});
    c.target = torch::rand({1, 6, 6, 6});
    cases.push_back(c);
  }
  return StackedCache::from_cases(cases);
}

SamplerOptions intensity_options() {
  SamplerOptions o;
  o.patch = {6, 6, 6};
  o.batch_size = 2;
  o.augment.flip_prob = 0;
  o.channel_names = {"ct", "other"};
  o.augment.intensity_channels = {"ct"};
  return o;
}

TEST(Augment, IntensityScaleShiftGammaAndNoiseAreBatchedPerSample) {
  const StackedCache cache = two_channel_cache();
  const Batch clean = PatchSampler(cache, intensity_options()).batch(0, 0);

  SamplerOptions o = intensity_options();
  o.augment.intensity_prob = 1;
  o.augment.intensity_scale = {2, 2};
  o.augment.intensity_shift = {0.5, 0.5};
  const Batch scaled = PatchSampler(cache, o).batch(0, 0);
  EXPECT_TRUE(torch::allclose(scaled.image.select(1, 0), clean.image.select(1, 0) * 2 + 0.5));
  EXPECT_TRUE(torch::equal(scaled.image.select(1, 1), clean.image.select(1, 1)));

  o = intensity_options();
  o.augment.gamma_prob = 1;
  o.augment.gamma_range = {2, 2};
  const Batch curved = PatchSampler(cache, o).batch(0, 0);
  for (int64_t b = 0; b < 2; ++b) {
    const auto x = clean.image[b][0];
    const auto lo = x.min(), hi = x.max();
    EXPECT_TRUE(torch::allclose(curved.image[b][0], lo + (hi - lo) * ((x - lo) / (hi - lo)).pow(2), 1e-5, 1e-6));
  }
  EXPECT_TRUE(torch::equal(curved.image.select(1, 1), clean.image.select(1, 1)));

  o = intensity_options();
  o.augment.noise_prob = 1;
  o.augment.noise_std = {0.1, 0.1};
  const PatchSampler noisy(cache, o);
  const Batch a = noisy.batch(0, 0), again = noisy.batch(0, 0);
  EXPECT_TRUE(torch::equal(a.image, again.image));  // seeded by (seed, epoch, step)
  const double sd = (a.image.select(1, 0) - clean.image.select(1, 0)).std().item<double>();
  EXPECT_NEAR(sd, 0.1, 0.015);
  EXPECT_TRUE(torch::equal(a.image.select(1, 1), clean.image.select(1, 1)));
  EXPECT_FALSE(torch::equal(a.image, noisy.batch(0, 1).image));
}

TEST(Augment, ProbabilitiesDecidePerSample) {
  const StackedCache cache = two_channel_cache();
  SamplerOptions o = intensity_options();
  o.augment.intensity_prob = 0.5;
  o.augment.intensity_scale = {3, 3};
  o.augment.intensity_shift = {0, 0};
  const PatchSampler sampler(cache, o);
  int64_t applied = 0, total = 0;
  for (int64_t i = 0; i < 400; ++i, ++total) applied += sampler.plan(0, i).scale == 3 ? 1 : 0;
  EXPECT_GT(applied, 150);
  EXPECT_LT(applied, 250);
}

}  // namespace
}  // namespace u3d
