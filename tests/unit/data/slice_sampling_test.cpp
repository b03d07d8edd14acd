// Slices (model.dims 2, issue 37): a patch of 1 voxel along one axis is a slice, and the samplers'
// spatial augmentation stays in its plane (augment.h): rotations out of the plane and elastic
// displacements along the slice axis would read neighbouring slices. Each case's image holds its
// slice index + 0.25 on every voxel of the slice, so a sample read from one plane holds one value;
// anything interpolated between slices would not. Patches are centred on the middle of the slices,
// so no padding is read. The host sampler and the device sampler (on a CPU
// cache here) alike.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "u3d/data/augment.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

constexpr float kPad = -3.0f;

StackedCache slice_indexed_cases(int64_t slice_axis) {
  std::vector<CachedCase> cases;
  for (int64_t i = 0; i < 3; ++i) {
    Shape3 shape = {64, 64, 64};
    shape[static_cast<size_t>(slice_axis)] = 14 + 2 * i;
    std::vector<int64_t> view = {1, 1, 1, 1};
    view[static_cast<size_t>(slice_axis) + 1] = shape[static_cast<size_t>(slice_axis)];
    CachedCase c;
    c.id = "s" + std::to_string(i);
    c.image = (torch::arange(shape[static_cast<size_t>(slice_axis)], torch::kFloat) + 0.25f)
                  .view(view)
                  .expand({1, shape[0], shape[1], shape[2]})
                  .contiguous();
    c.target = torch::rand({1, shape[0], shape[1], shape[2]});
    // Foreground in the middle of every slice: patches centred there never reach past the volume (no
    // padding blended in), whatever the rotation, scale and displacement.
    c.mask = torch::zeros({1, shape[0], shape[1], shape[2]}, torch::kUInt8);
    torch::Tensor middle = c.mask;
    for (int64_t a = 0; a < 3; ++a) {
      if (a != slice_axis) middle = middle.narrow(a + 1, 24, 16);
    }
    middle.fill_(1);
    cases.push_back(c);
  }
  return StackedCache::from_cases(cases);
}

SamplerOptions out_of_plane_options(int64_t slice_axis) {
  SamplerOptions o = test::flip_rot_sampler({1, 1, 1}, 4, 17);
  o.patch = {10, 12, 12};
  o.patch[static_cast<size_t>(slice_axis)] = 1;
  o.augment.flip_prob = o.augment.rot90_prob = 0.0;
  o.augment.affine_prob = 1.0;
  o.augment.affine_rotation = {40, 40, 40};
  o.augment.affine_scale = {0.8, 1.25};
  test::set_elastic(o, 1.0, 3.0, 3);
  o.pad_value = kPad;
  o.foreground_fraction = 1.0;
  o.foreground = "mask";
  return o;
}

// Every sample of `images` (N, 1, d, h, w) holds one slice's value (+ padding), not a blend.
void expect_one_plane_per_sample(const torch::Tensor& images, const std::string& what) {
  for (int64_t n = 0; n < images.size(0); ++n) {
    const torch::Tensor v = images[n].flatten();
    const torch::Tensor inside = v.masked_select(v != kPad);
    ASSERT_EQ(inside.numel(), v.numel()) << what << ": no padding expected";
    const float first = inside[0].item<float>();
    EXPECT_NEAR(first - 0.25f, std::round(first - 0.25f), 1e-4) << what << " sample " << n;
    EXPECT_TRUE(torch::allclose(inside, torch::full_like(inside, first), 0, 1e-4))
        << what << " sample " << n << ": values from " << inside.min().item<float>() << " to "
        << inside.max().item<float>();
  }
}

TEST(SliceSampling, SliceAxisIsFoundFromThePatch) {
  EXPECT_EQ(slice_axis_of({1, 256, 256}), 0);
  EXPECT_EQ(slice_axis_of({64, 1, 64}), 1);
  EXPECT_EQ(slice_axis_of({64, 64, 1}), 2);
  EXPECT_EQ(slice_axis_of({64, 64, 64}), -1);
  EXPECT_EQ(slice_axis_of({1, 1, 64}), -1);
}

TEST(SliceSampling, RotationAndElasticStayInTheSlicesPlaneOnBothSamplers) {
  for (const int64_t axis : {0, 1, 2}) {
    const StackedCache cache = slice_indexed_cases(axis);
    const SamplerOptions o = out_of_plane_options(axis);
    const PatchSampler host(cache, o);
    DeviceSampler device(host);
    device.set_epoch(2, 4);
    for (int64_t step = 0; step < 4; ++step) {
      const std::string what = "axis " + std::to_string(axis) + " step " + std::to_string(step);
      EXPECT_TRUE(host.plan(2, step * 4).affine) << what;  // scaling still applies
      expect_one_plane_per_sample(host.raw_batch(2, step).images[0], "host " + what);
      expect_one_plane_per_sample(device.raw_batch(step).images[0], "device " + what);
    }
  }
  // The same options on a 3D patch do read across slices (the check above can fail).
  SamplerOptions o = out_of_plane_options(0);
  o.patch = {6, 12, 12};
  const StackedCache cache = slice_indexed_cases(0);
  const PatchSampler host(cache, o);
  const torch::Tensor images = host.raw_batch(2, 0).images[0];
  const torch::Tensor v = images[0].flatten();
  const torch::Tensor inside = v.masked_select(v != kPad);
  EXPECT_GT((inside - inside[0]).abs().max().item<float>(), 0.5f);
}

}  // namespace
}  // namespace u3d
