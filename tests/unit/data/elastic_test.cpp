// Elastic deformation (augment.elastic_*): the displacement field, its effect on a resampled patch,
// labels kept, the identity at zero magnitude, nothing changed when off, determinism across threads
// and the device sampler (run here on a CPU cache; the CUDA comparison is in
// tests/gpu/elastic_gpu_test.cpp).
#include <gtest/gtest.h>

#include <set>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/data/augment.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/loader.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

// Five cases of two sizes: an integer image channel (uint8 field), a float channel, labels
// {0, 1, 2, 255} (255: an ignore label) or a float target, and a loss mask.
StackedCache cases(bool segmentation) {
  return StackedCache::from_cases(
      test::random_cases("e", 5, {13, 14, 16}, 6, /*labels=*/segmentation ? 4 : 0, /*top_label_ignored=*/true));
}

SamplerOptions options(double elastic_prob, double magnitude) {
  SamplerOptions o = test::flip_rot_sampler({10, 12, 12}, 3, 21);
  o.augment.rot90_plane = {1, 2};
  o.augment.intensity_prob = 0.5;
  o.foreground_fraction = 0.3;
  o.foreground = "mask";
  test::set_elastic(o, elastic_prob, magnitude, 4);
  o.pad_value = -3;
  return o;
}

TEST(Elastic, FieldSpansTheControlGridAndIsSmooth) {
  const double magnitude = 3.0;
  const int64_t g = 4;
  const Shape3 patch = {16, 22, 31};
  torch::manual_seed(1);
  const torch::Tensor control = (torch::rand({2, 3, g, g, g}) * 2 - 1) * magnitude;
  const torch::Tensor field = elastic_field(control, patch);
  ASSERT_EQ(field.sizes(), (torch::IntArrayRef{2, 3, 16, 22, 31}));
  EXPECT_EQ(field.scalar_type(), torch::kFloat);
  // align_corners: the patch's corner voxels carry the corner control values.
  EXPECT_TRUE(torch::allclose(field.select(2, 0).select(2, 0).select(2, 0),
                              control.select(2, 0).select(2, 0).select(2, 0), 0, 1e-6));
  EXPECT_TRUE(torch::allclose(field.select(2, 15).select(2, 21).select(2, 30),
                              control.select(2, g - 1).select(2, g - 1).select(2, g - 1), 0, 1e-6));
  EXPECT_LE(field.abs().max().item<double>(), magnitude + 1e-5);
  // Neighbouring voxels differ by at most the control range over the control spacing.
  for (int64_t a = 0; a < 3; ++a) {
    const int64_t n = patch[static_cast<size_t>(a)];
    const double bound = 2 * magnitude * static_cast<double>(g - 1) / static_cast<double>(n - 1);
    const double step = field.diff(1, 2 + a).abs().max().item<double>();
    EXPECT_LE(step, bound + 1e-5) << "axis " << a;
    EXPECT_GT(step, 0.0) << "axis " << a;
  }
}

// A linear field f = 1 + 2 z + 3 y + 5 x is reproduced by trilinear resampling, so the deformed patch
// must equal f at source = centre + M (p - pc) + disp(p) wherever the taps are inside.
TEST(Elastic, ResamplingReadsAtTheDisplacedSource) {
  const int64_t n = 20;
  auto z = torch::arange(n, torch::kFloat).view({n, 1, 1}), y = z.view({1, n, 1}), x = z.view({1, 1, n});
  const auto f = (1 + 2 * z + 3 * y + 5 * x).unsqueeze(0).contiguous();  // (1, n, n, n)
  torch::manual_seed(2);
  PatchTransform t{{5, 6, 4}, {8, 9, 10}, flip_matrix({true, false, true})};
  t.displacement = elastic_field((torch::rand({1, 3, 3, 3, 3}) * 2 - 1) * 2.5, t.patch)[0].contiguous();
  torch::Tensor out = torch::empty({1, 8, 9, 10});
  resample_patch(f, t, Interp::kLinear, nullptr, out);
  const auto d = t.displacement.accessor<float, 4>();
  double moved = 0;
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 9; ++j) {
      for (int64_t k = 0; k < 10; ++k) {
        const double q0 = 5 + 3.5 - (i - 3.5) + d[0][i][j][k], q1 = 6 + j + d[1][i][j][k],
                     q2 = 4 + 4.5 - (k - 4.5) + d[2][i][j][k];
        EXPECT_NEAR(out[0][i][j][k].item<double>(), 1 + 2 * q0 + 3 * q1 + 5 * q2, 2e-3) << i << " " << j << " " << k;
        moved = std::max(moved, std::abs(static_cast<double>(d[0][i][j][k])));
      }
    }
  }
  EXPECT_GT(moved, 0.5);
  // Nearest neighbour reads the value at the rounded displaced source (labels: int16 values of f).
  const auto labels = f.to(torch::kShort);
  torch::Tensor nearest = torch::empty({1, 8, 9, 10}, torch::kShort);
  resample_patch(labels, t, Interp::kNearest, nullptr, nearest);
  for (int64_t i = 0; i < 8; ++i) {
    for (int64_t j = 0; j < 9; ++j) {
      for (int64_t k = 0; k < 10; ++k) {
        const double q0 = 5 + 3.5 - (i - 3.5) + d[0][i][j][k], q1 = 6 + j + d[1][i][j][k],
                     q2 = 4 + 4.5 - (k - 4.5) + d[2][i][j][k];
        EXPECT_EQ(nearest[0][i][j][k].item<int64_t>(),
                  static_cast<int64_t>(1 + 2 * std::round(q0) + 3 * std::round(q1) + 5 * std::round(q2)));
      }
    }
  }
}

TEST(Elastic, ZeroMagnitudeIsThePlainPatchExactly) {
  for (const bool segmentation : {false, true}) {
    const StackedCache cache = cases(segmentation);
    const PatchSampler plain(cache, options(0, 0)), zero(cache, options(1, 0));
    for (int64_t step = 0; step < 4; ++step) {
      EXPECT_TRUE(zero.plan(1, step * 3).elastic);
      test::expect_same_batch(zero.batch(1, step), plain.batch(1, step), "step " + std::to_string(step));
    }
  }
  // resample_patch directly: a zero displacement reads the crop itself, both interpolations.
  const auto src = torch::rand({2, 7, 8, 9});
  PatchTransform t{{1, 2, 3}, {5, 5, 5}, kIdentity3};
  t.displacement = torch::zeros({3, 5, 5, 5});
  const auto crop = src.slice(1, 1, 6).slice(2, 2, 7).slice(3, 3, 8);
  for (const Interp interp : {Interp::kLinear, Interp::kNearest}) {
    torch::Tensor out = torch::empty({2, 5, 5, 5});
    resample_patch(src, t, interp, nullptr, out);
    EXPECT_TRUE(torch::equal(out, crop));
  }
}

TEST(Elastic, OffChangesNothingAndDrawsAfterEveryOtherChoice) {
  const StackedCache cache = cases(/*segmentation=*/true);
  SamplerOptions off = options(0, 4), on = options(1, 4);
  on.augment.affine_prob = off.augment.affine_prob = 0.5;
  const PatchSampler a(cache, off), b(cache, on);
  int64_t elastic = 0;
  for (int64_t i = 0; i < 60; ++i) {
    const SamplePlan p = a.plan(2, i), q = b.plan(2, i);
    EXPECT_FALSE(p.elastic);
    EXPECT_FALSE(p.transform.displacement.defined());
    elastic += q.elastic ? 1 : 0;
    // Every other choice is the same draw with and without elastic.
    EXPECT_EQ(p.case_index, q.case_index);
    EXPECT_EQ(p.transform.origin, q.transform.origin);
    EXPECT_EQ(p.transform.matrix, q.transform.matrix);
    EXPECT_EQ(p.scale, q.scale);
    EXPECT_EQ(p.shift, q.shift);
  }
  EXPECT_EQ(elastic, 60);
  SamplerOptions half = options(0.5, 4);
  const PatchSampler c(cache, half);
  int64_t drawn = 0;
  for (int64_t i = 0; i < 400; ++i) drawn += c.plan(0, i).elastic ? 1 : 0;
  EXPECT_GT(drawn, 150);
  EXPECT_LT(drawn, 250);
}

TEST(Elastic, LabelsKeepTheirValuesAndContentMoves) {
  const StackedCache cache = cases(/*segmentation=*/true);
  SamplerOptions o = options(1, 4);
  o.augment.affine_prob = 0.5;
  const PatchSampler deformed(cache, o), plain(cache, options(0, 0));
  for (int64_t step = 0; step < 5; ++step) {
    const RawBatch r = deformed.raw_batch(0, step);
    ASSERT_EQ(r.target.scalar_type(), torch::kUInt8);
    const torch::Tensor values = std::get<0>(torch::_unique(r.target));
    for (int64_t i = 0; i < values.numel(); ++i) {
      const int64_t v = values[i].item<int64_t>();
      EXPECT_TRUE(v == 0 || v == 1 || v == 2 || v == 255) << v;
    }
    EXPECT_TRUE(torch::logical_or(r.mask == 0, r.mask == 1).all().item<bool>());
    EXPECT_EQ(r.images[0].scalar_type(), torch::kFloat);  // trilinear images
    const Batch b = deformed.batch(0, step), p = plain.batch(0, step);
    EXPECT_EQ(b.cases, p.cases);
    EXPECT_FALSE(torch::equal(b.image, p.image)) << step;
    EXPECT_GT((b.target != p.target).sum().item<int64_t>(), 0) << step;
  }
}

TEST(Elastic, BatchesDoNotDependOnTheNumberOfThreads) {
  const StackedCache cache = cases(/*segmentation=*/false);
  SamplerOptions o = options(0.7, 3);
  o.augment.affine_prob = 0.3;
  const PatchSampler sampler(cache, o), again(cache, o);
  const int64_t steps = 4;
  std::vector<Batch> reference;
  for (int64_t step = 0; step < steps; ++step) reference.push_back(again.batch(1, step));
  for (const int64_t workers : {1, 3}) {
    BatchLoader loader(sampler, LoaderOptions{torch::kCPU, workers, /*prefetch=*/2, steps, /*epochs=*/1, true});
    for (int64_t step = 0; step < steps; ++step) {
      const Batch b = loader.next(1, step);
      test::expect_same_batch(b, reference[static_cast<size_t>(step)], "workers " + std::to_string(workers));
    }
  }
}

TEST(Elastic, DeviceSamplerMatchesTheHostSampler) {
  for (const bool segmentation : {false, true}) {
    const StackedCache cache = cases(segmentation);
    SamplerOptions o = options(0.6, 3.5);
    o.augment.affine_prob = 0.4;
    o.augment.elastic_grid = 3;
    const PatchSampler host(cache, o);
    DeviceSampler device(host);
    device.set_epoch(3, 5);
    for (int64_t step = 0; step < 5; ++step) {
      const RawBatch a = device.raw_batch(step), b = host.raw_batch(3, step);
      EXPECT_TRUE(torch::equal(a.plan, b.plan)) << step;
      EXPECT_TRUE(torch::equal(a.target, b.target)) << step;
      EXPECT_TRUE(torch::equal(a.mask, b.mask)) << step;
      for (size_t f = 0; f < a.images.size(); ++f) {
        EXPECT_TRUE(torch::allclose(a.images[f], b.images[f], 0, 1e-4)) << step;
      }
    }
  }
}

}  // namespace
}  // namespace u3d
