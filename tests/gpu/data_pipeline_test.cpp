// GPU paths of the data pipeline: GPU-resident cache and sampling, pinned cache and staging ring with
// copies on a side stream. Every test skips itself where no CUDA device is present.
#include <gtest/gtest.h>

#include "devices.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/data/cache.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/loader.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

using test::kCuda;

using test::dose_data;

SamplerOptions sampler_options(bool affine) {
  SamplerOptions o = test::flip_rot_sampler({16, 16, 16}, 3, 9);
  o.foreground_fraction = 0.33;
  o.augment.intensity_prob = 0.5;
  o.channel_names = {"ct", "spinal_cord", "parotid_l", "parotid_r", "ptv"};
  o.augment.intensity_channels = {"ct"};
  if (affine) o.augment.affine_prob = 0.5;
  return o;
}

StackedCache load(const fs::path& file, CachePlacement placement) {
  const DatasetReader reader(file);
  const Preprocessor pre(dose_data(), reader.info());
  CacheOptions o;
  o.placement = placement;
  o.device = kCuda;
  return StackedCache::load(reader, reader.split("train"), pre, o);
}

class GpuData : public test::CudaTest {};

TEST_F(GpuData, CachePlacementsLiveWhereAsked) {
  test::make_phantom(dir / "p.h5", Task::kDose, 6, 24);
  const StackedCache gpu = load(dir / "p.h5", CachePlacement::kGpu);
  EXPECT_TRUE(gpu.image_fields()[0].arena.is_cuda());
  EXPECT_TRUE(gpu.device().is_cuda());
  const StackedCache pinned = load(dir / "p.h5", CachePlacement::kPinned);
  EXPECT_TRUE(pinned.image_fields()[0].arena.is_pinned());
  EXPECT_EQ(resolve_placement(CachePlacement::kAuto, 0.5, kCuda, 1 << 20), CachePlacement::kGpu);
  EXPECT_EQ(resolve_placement(CachePlacement::kAuto, 0.5, kCuda, int64_t{1} << 50), CachePlacement::kPinned);
  for (size_t f = 0; f < gpu.image_fields().size(); ++f) {
    EXPECT_TRUE(torch::equal(gpu.image_fields()[f].arena.cpu(), pinned.image_fields()[f].arena));
  }
}

TEST_F(GpuData, GpuResidentSamplingEqualsTheHostSampler) {
  test::make_phantom(dir / "p.h5", Task::kDose, 6, 24);
  const StackedCache host_cache = load(dir / "p.h5", CachePlacement::kMemory);
  const StackedCache gpu_cache = load(dir / "p.h5", CachePlacement::kGpu);
  for (const bool affine : {false, true}) {
    const PatchSampler host(host_cache, sampler_options(affine));
    const PatchSampler on_gpu(gpu_cache, sampler_options(affine));
    BatchLoader loader(on_gpu, LoaderOptions{kCuda, 1, 2, 4, -1, true});
    for (int64_t step = 0; step < 4; ++step) {
      const Batch a = loader.next(2, step);
      const Batch b = host.batch(2, step);
      ASSERT_TRUE(a.image.is_cuda());
      if (affine) {
        EXPECT_TRUE(torch::allclose(a.image.cpu(), b.image, 1e-3, 1e-3)) << step;
      } else {
        EXPECT_TRUE(torch::equal(a.image.cpu(), b.image)) << step;
        EXPECT_TRUE(torch::equal(a.target.cpu(), b.target)) << step;
        EXPECT_TRUE(torch::equal(a.mask.cpu(), b.mask)) << step;
      }
    }
  }
}

// A channels-last network's batches leave the GPU sampler and the pinned ring in ChannelsLast3d
// order, with the host sampler's values (the finalizer converts dtype and layout in one pass).
TEST_F(GpuData, ChannelsLastBatchesFromEveryDeviceSource) {
  test::make_phantom(dir / "p.h5", Task::kDose, 6, 24);
  const StackedCache host_cache = load(dir / "p.h5", CachePlacement::kMemory);
  SamplerOptions o = sampler_options(false);
  const PatchSampler host(host_cache, o);
  o.channels_last_images = true;
  for (const CachePlacement placement : {CachePlacement::kGpu, CachePlacement::kPinned}) {
    const StackedCache cache = load(dir / "p.h5", placement);
    const PatchSampler sampler(cache, o);
    BatchLoader loader(sampler, LoaderOptions{kCuda, 1, 2, 4, -1, true});
    for (int64_t step = 0; step < 3; ++step) {
      const Batch a = loader.next(1, step);
      ASSERT_TRUE(a.image.is_cuda());
      EXPECT_TRUE(a.image.is_contiguous(at::MemoryFormat::ChannelsLast3d)) << step;
      EXPECT_TRUE(torch::equal(a.image.cpu(), host.batch(1, step).image)) << step;
    }
  }
}

TEST_F(GpuData, PinnedStagingRingDeliversTheHostBatchesOnTheDevice) {
  test::make_phantom(dir / "p.h5", Task::kDose, 6, 24);
  const StackedCache cache = load(dir / "p.h5", CachePlacement::kPinned);
  const PatchSampler sampler(cache, sampler_options(false));
  for (const int64_t workers : {1, 4}) {
    BatchLoader loader(sampler, LoaderOptions{kCuda, workers, 3, 5, -1, true});
    for (int64_t k = 0; k < 20; ++k) {
      const Batch a = loader.next(k / 5, k % 5);
      // Use the batch on the compute stream as training would, then compare.
      const Batch b = sampler.batch(k / 5, k % 5);
      EXPECT_TRUE(torch::equal(a.image.cpu(), b.image)) << k;
      EXPECT_TRUE(torch::equal(a.target.cpu(), b.target)) << k;
    }
  }
}

TEST_F(GpuData, TrainingWithEachPlacement) {
  test::make_phantom(dir / "p.h5", Task::kDose, 8, 32);
  for (const std::string placement : {"gpu", "pinned", "memory"}) {
    test::write_text(dir / (placement + ".yaml"), test::tiny_config("p.h5", placement));
    const auto r = trainer({"--config", placement + ".yaml", "--set", "training.device=cuda", "--set",
                            "data.cache=" + placement, "--set", "training.deterministic=false"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = test::read_csv(dir / "runs" / placement / "metrics.csv");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_FALSE(rows.back().at("data_share").empty());
  }
}

TEST_F(GpuData, BenchmarkMeasuresEveryPlacement) {
  phantom(6, 32, {"b"});
  const auto r = trainer({"--config", "b.yaml", "--set", "training.device=cuda", "--benchmark", "data", "--workers",
                          "1,2", "--benchmark-seconds", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* p : {"\"placement\": \"memory\"", "\"placement\": \"pinned\"", "\"placement\": \"gpu\""}) {
    EXPECT_NE(r.output.find(p), std::string::npos) << p << "\n" << r.output;
  }
}

}  // namespace
}  // namespace u3d

namespace u3d {
namespace {

// Affine augmentation on the GPU sampler: coordinates in float64 in the host's order, so the
// nearest-neighbour labels and loss masks equal the host sampler's (a voxel may differ only where a
// coordinate lies within float64 rounding of a half voxel), and trilinear images agree to float32
// rounding. Before, a TF32 matmul rounded the coordinates to 10 mantissa bits.
TEST_F(GpuData, AffineLabelsAndMasksEqualTheHostSampler) {
  for (const Task task : {Task::kDose, Task::kSegmentation}) {
    const fs::path file = dir / (task == Task::kDose ? "d.h5" : "s.h5");
    test::make_phantom(file, task, 6, 24);
    const DatasetReader reader(file);
    const Preprocessor pre(task == Task::kDose ? dose_data() : DataConfig{}, reader.info());
    CacheOptions co;
    co.device = kCuda;
    co.placement = CachePlacement::kMemory;
    const StackedCache host_cache = StackedCache::load(reader, reader.split("train"), pre, co);
    co.placement = CachePlacement::kGpu;
    const StackedCache gpu_cache = StackedCache::load(reader, reader.split("train"), pre, co);
    SamplerOptions o = sampler_options(/*affine=*/true);
    o.augment.affine_prob = 1.0;
    o.augment.affine_rotation = {30, 30, 30};
    o.augment.affine_scale = {0.7, 1.4};
    if (task == Task::kSegmentation) {
      o.channel_names = pre.channel_names();
      o.augment.intensity_channels = {};
      o.foreground_fraction = 0;
    }
    const PatchSampler host(host_cache, o);
    const PatchSampler on_gpu(gpu_cache, o);
    DeviceSampler device(on_gpu);
    device.set_epoch(1, 4);
    for (int64_t step = 0; step < 4; ++step) {
      const RawBatch a = device.raw_batch(step), b = host.raw_batch(1, step);
      ASSERT_TRUE(a.target.is_cuda());
      EXPECT_TRUE(torch::equal(a.plan.cpu(), b.plan)) << step;
      const int64_t voxels = b.target.numel();
      EXPECT_LE((a.target.cpu() != b.target).sum().item<int64_t>(), voxels / 10000) << "target, step " << step;
      if (b.mask.defined()) {
        EXPECT_LE((a.mask.cpu() != b.mask).sum().item<int64_t>(), voxels / 10000) << "mask, step " << step;
      }
      for (size_t f = 0; f < a.images.size(); ++f) {
        EXPECT_TRUE(torch::allclose(a.images[f].cpu(), b.images[f], 1e-5, 1e-5)) << "image, step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace u3d
