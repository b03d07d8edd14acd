// Elastic deformation on the GPU sampler: the same draws as the host sampler (labels and masks
// equal but for coordinates within rounding of a half voxel, trilinear images to float32 rounding),
// and next_batch() with elastic captured in a CUDA graph (a host read or a draw-dependent shape
// would make the capture fail); the cached ground-truth maps (data/truth_maps.h) cropped on the GPU
// as on the host, and captured with the batch. Every test skips itself where no CUDA device is present.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "devices.h"
#include "fixtures.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/sampler.h"
#include "u3d/data/truth_maps.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

using test::kCuda;

// Six cases of two sizes: an integer channel (uint8 field), a float channel, labels {0, 1, 2, 255}
// or a float target, and a loss mask.
std::vector<CachedCase> cases(bool segmentation) {
  return test::random_cases("g", 6, {28, 30, 32}, 8, /*labels=*/segmentation ? 4 : 0, /*top_label_ignored=*/true);
}

SamplerOptions elastic_options() {
  SamplerOptions o = test::flip_rot_sampler({24, 24, 24}, 4, 17);
  o.augment.affine_prob = 0.4;
  test::set_elastic(o, 0.7, 4, 4);
  o.foreground_fraction = 0.3;
  o.foreground = "mask";
  o.pad_value = -2;
  return o;
}

StackedCache gpu_cache(const std::vector<CachedCase>& c, const LabelMapFn& label_maps = {}) {
  CacheOptions co;
  co.device = kCuda;
  co.placement = CachePlacement::kGpu;
  co.label_maps = label_maps;
  return StackedCache::from_cases(c, co);
}

TEST(GpuElastic, DeviceSamplerEqualsTheHostSampler) {
  U3D_REQUIRE_CUDA();
  for (const bool segmentation : {false, true}) {
    const std::vector<CachedCase> c = cases(segmentation);
    const StackedCache host_cache = StackedCache::from_cases(c), device_cache = gpu_cache(c);
    const SamplerOptions o = elastic_options();
    const PatchSampler host(host_cache, o), on_gpu(device_cache, o);
    DeviceSampler device(on_gpu);
    device.set_epoch(2, 5);
    int64_t elastic = 0;
    for (int64_t step = 0; step < 5; ++step) {
      for (int64_t b = 0; b < o.batch_size; ++b) elastic += host.plan(2, step * o.batch_size + b).elastic ? 1 : 0;
      const RawBatch a = device.raw_batch(step), h = host.raw_batch(2, step);
      ASSERT_TRUE(a.target.is_cuda());
      EXPECT_TRUE(torch::equal(a.plan.cpu(), h.plan)) << step;
      const int64_t voxels = h.target.numel();
      EXPECT_LE((a.target.cpu() != h.target).sum().item<int64_t>(), voxels / 10000) << "target, step " << step;
      EXPECT_LE((a.mask.cpu() != h.mask).sum().item<int64_t>(), voxels / 10000) << "mask, step " << step;
      for (size_t f = 0; f < a.images.size(); ++f) {
        EXPECT_TRUE(torch::allclose(a.images[f].cpu(), h.images[f], 1e-5, 1e-4)) << "image, step " << step;
      }
    }
    EXPECT_GT(elastic, 5);  // the comparison saw deformed samples
  }
}

TEST(GpuElastic, TruthMapsOnTheGpuCacheEqualTheHosts) {
  U3D_REQUIRE_CUDA();
  const std::vector<CachedCase> c = cases(/*segmentation=*/true);
  const LabelMapFn maps = truth_map_maker({/*skeleton=*/true, /*distance=*/true, /*num_classes=*/3, 2});
  CacheOptions host_options;
  host_options.label_maps = maps;
  const StackedCache host_cache = StackedCache::from_cases(c, host_options), device_cache = gpu_cache(c, maps);
  ASSERT_NE(device_cache.skeleton(), nullptr);
  ASSERT_TRUE(device_cache.distance()->arena.is_cuda());
  const SamplerOptions o = elastic_options();
  const PatchSampler host(host_cache, o), on_gpu(device_cache, o);
  DeviceSampler device(on_gpu);
  device.set_epoch(2, 5);
  for (int64_t step = 0; step < 5; ++step) {
    const RawBatch a = device.raw_batch(step), h = host.raw_batch(2, step);
    ASSERT_TRUE(a.skeleton.is_cuda());
    const int64_t voxels = h.skeleton.numel();
    EXPECT_LE((a.skeleton.cpu() != h.skeleton).sum().item<int64_t>(), voxels / 10000) << "skeleton, step " << step;
    EXPECT_TRUE(torch::allclose(a.distance.cpu(), h.distance, 1e-4, 1e-2)) << "distance, step " << step;
    const Batch b = on_gpu.finalizer()(a);
    EXPECT_TRUE(b.maps.distance.is_cuda());
    EXPECT_EQ(b.maps.skeleton.sizes(), b.target.sizes());
  }
}

TEST(GpuElastic, NextBatchWithElasticIsCapturedInACudaGraph) {
  U3D_REQUIRE_CUDA();
  const StackedCache cache = gpu_cache(cases(/*segmentation=*/true));
  const PatchSampler sampler(cache, elastic_options());
  DeviceSampler cursor(sampler), indexed(sampler);
  ASSERT_TRUE(cursor.capturable());
  cursor.seek(/*epoch=*/1, /*step=*/0, /*steps_per_epoch=*/6);
  indexed.set_epoch(1, 6);
  (void)cursor.next_batch();  // warm-up outside the capture: step 0
  auto stream = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();
  Batch captured;
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    graph.capture_begin();
    captured = cursor.next_batch();
    graph.capture_end();
  }
  for (int64_t step = 1; step <= 3; ++step) {
    {
      c10::cuda::CUDAStreamGuard guard(stream);
      graph.replay();
    }
    torch::cuda::synchronize();
    const Batch expected = indexed.batch(step);
    EXPECT_TRUE(torch::equal(captured.image, expected.image)) << step;
    EXPECT_TRUE(torch::equal(captured.target, expected.target)) << step;
    EXPECT_TRUE(torch::equal(captured.mask, expected.mask)) << step;
  }
}

}  // namespace
}  // namespace u3d
