// The batch loader (threads, bounded queue, ordering, restarts, failures, shutdown) and the device
// sampler's equality with the host sampler (run here on a CPU cache).
#include <gtest/gtest.h>

#include <cstdlib>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/loader.h"
#include "u3d/data/sampler.h"

namespace u3d {
namespace {

// Seven cases of two sizes; channel 0 holds integers (uint8 field), channel 1 floats, labels 0..2.
StackedCache mixed_cache(bool segmentation = false) {
  return StackedCache::from_cases(test::random_cases("case", 7, {12, 12, 13}, 4, /*labels=*/segmentation ? 3 : 0));
}

SamplerOptions loader_options() {
  SamplerOptions o = test::flip_rot_sampler({8, 8, 8}, 3, 5);
  o.augment.rot90_plane = {1, 2};
  o.foreground_fraction = 0.4;
  o.foreground = "mask";
  return o;
}

TEST(Loader, BatchStreamIsTheSameForAnyNumberOfWorkers) {
  const StackedCache cache = mixed_cache();
  const PatchSampler sampler(cache, loader_options());
  const int64_t steps = 5;
  for (const int64_t workers : {1, 3, 8}) {
    BatchLoader loader(sampler, LoaderOptions{torch::kCPU, workers, /*prefetch=*/3, steps, /*epochs=*/4, true});
    for (int64_t epoch = 1; epoch <= 4; ++epoch) {
      for (int64_t step = 0; step < steps; ++step) {
        const Batch b = loader.next(epoch, step);
        EXPECT_EQ(b.epoch, epoch);
        EXPECT_EQ(b.step, step);
        test::expect_same_batch(b, sampler.batch(epoch, step),
                                fmt::format("{} workers, epoch {} step {}", workers, epoch, step));
      }
    }
    EXPECT_EQ(loader.batches(), 4 * steps);
    EXPECT_GE(loader.wait_seconds(), 0.0);
  }
}

TEST(Loader, StressManyWorkersManyBatchesThenCleanShutdown) {
  const StackedCache cache = mixed_cache(/*segmentation=*/true);
  SamplerOptions o = loader_options();
  o.patch = {4, 4, 4};
  o.batch_size = 2;
  o.foreground = "auto";
  const PatchSampler sampler(cache, o);
  std::vector<Batch> reference;
  for (int64_t step = 0; step < 300; ++step) reference.push_back(sampler.batch(3 + step / 100, step % 100));
  for (int round = 0; round < 3; ++round) {
    BatchLoader loader(sampler, LoaderOptions{torch::kCPU, 16, /*prefetch=*/2, 100, -1, true});
    for (int64_t step = 0; step < 300; ++step) {
      test::expect_same_batch(loader.next(3 + step / 100, step % 100), reference[static_cast<size_t>(step)],
                              fmt::format("round {} step {}", round, step));
    }
    // Leaving with every worker blocked on a full queue: the destructor wakes and joins them.
  }
}

TEST(Loader, ResumesAndRestartsAtAnyPosition) {
  const StackedCache cache = mixed_cache();
  const PatchSampler sampler(cache, loader_options());
  BatchLoader loader(sampler, LoaderOptions{torch::kCPU, 2, 2, 6, -1, true});
  test::expect_same_batch(loader.next(2, 4), sampler.batch(2, 4), "resume mid-epoch");
  test::expect_same_batch(loader.next(2, 5), sampler.batch(2, 5), "next");
  test::expect_same_batch(loader.next(3, 0), sampler.batch(3, 0), "epoch wraps");
  test::expect_same_batch(loader.next(7, 1), sampler.batch(7, 1), "jump");
  loader.stop();
  loader.stop();
  test::expect_same_batch(loader.next(7, 2), sampler.batch(7, 2), "after stop");
}

TEST(Loader, StopsAtTheLastEpoch) {
  const StackedCache cache = mixed_cache();
  const PatchSampler sampler(cache, loader_options());
  BatchLoader loader(sampler, LoaderOptions{torch::kCPU, 2, 4, 2, /*epochs=*/2, true});
  (void)loader.next(2, 0);
  (void)loader.next(2, 1);
  EXPECT_THROW(loader.next(3, 0), std::logic_error);
}

TEST(Loader, RawBatchesKeepCompactDtypes) {
  const StackedCache cache = mixed_cache();
  const PatchSampler sampler(cache, loader_options());
  BatchLoader loader(sampler, LoaderOptions{torch::kCPU, 2, 2, 4, -1, /*finalize=*/false});
  const RawBatch& raw = loader.next_raw(0, 1);
  ASSERT_EQ(raw.images.size(), 2u);
  EXPECT_EQ(raw.images[0].scalar_type(), torch::kUInt8);
  EXPECT_EQ(raw.images[1].scalar_type(), torch::kFloat);
  EXPECT_EQ(raw.mask.scalar_type(), torch::kUInt8);
  test::expect_same_batch(sampler.finalizer()(raw), sampler.batch(0, 1), "finalized raw");
  EXPECT_THROW(loader.next(0, 2), std::logic_error);
}

TEST(Loader, AWorkerFailureStopsWithTheCaseAndReason) {
  const StackedCache cache = mixed_cache();
  ::setenv("U3D_TEST_FAULTS", "sampler_case@case3", 1);
  const PatchSampler sampler(cache, loader_options());
  ::unsetenv("U3D_TEST_FAULTS");
  for (const int64_t workers : {1, 4}) {
    BatchLoader loader(sampler, LoaderOptions{torch::kCPU, workers, 3, 5, -1, true});
    try {
      for (int64_t step = 0; step < 50; ++step) (void)loader.next(step / 5, step % 5);
      FAIL() << "expected a DataError";
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("case 'case3'"), std::string::npos) << m;
      EXPECT_NE(m.find("injected fault"), std::string::npos) << m;
    }
    EXPECT_THROW(loader.next(0, 0), DataError);  // stays failed; the destructor joins
  }
}

// The device sampler, run on a CPU cache, computes the same plans with tensor ops.
TEST(DeviceSampler, MatchesTheHostSamplerBitForBit) {
  for (const bool segmentation : {false, true}) {
    const StackedCache cache = mixed_cache(segmentation);
    SamplerOptions o = loader_options();
    o.augment.flip_axes = {0, 2};
    o.augment.intensity_prob = 0.5;
    o.augment.gamma_prob = 0.5;
    const PatchSampler host(cache, o);
    DeviceSampler device(host);
    for (const int64_t epoch : {0, 3}) {
      device.set_epoch(epoch, 6);
      for (int64_t step = 0; step < 6; ++step) {
        const RawBatch a = device.raw_batch(step), b = host.raw_batch(epoch, step);
        ASSERT_EQ(a.images.size(), b.images.size());
        for (size_t f = 0; f < a.images.size(); ++f) EXPECT_TRUE(torch::equal(a.images[f], b.images[f])) << step;
        EXPECT_TRUE(torch::equal(a.target, b.target)) << step;
        EXPECT_TRUE(torch::equal(a.mask, b.mask)) << step;
        EXPECT_TRUE(torch::equal(a.plan, b.plan)) << step;
        test::expect_same_batch(
            Batch(device.batch(step)),
            [&] {
              Batch x = host.batch(epoch, step);
              x.cases.clear();  // the device sampler keeps case indices on the device only
              return x;
            }(),
            "finalized");
      }
    }
  }
}

TEST(DeviceSampler, AffineAgreesWithTheHostToRounding) {
  const StackedCache cache = mixed_cache();
  SamplerOptions o = loader_options();
  o.augment.affine_prob = 0.7;
  o.augment.affine_rotation = {25, 25, 25};
  o.augment.affine_scale = {0.8, 1.25};
  o.pad_value = 1.5;
  const PatchSampler host(cache, o);
  DeviceSampler device(host);
  device.set_epoch(1, 4);
  for (int64_t step = 0; step < 4; ++step) {
    const RawBatch a = device.raw_batch(step), b = host.raw_batch(1, step);
    EXPECT_TRUE(torch::equal(a.plan, b.plan));
    for (size_t f = 0; f < a.images.size(); ++f) {
      EXPECT_EQ(a.images[f].scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(a.images[f], b.images[f], 1e-3, 1e-3)) << step;
    }
    EXPECT_TRUE(torch::allclose(a.target, b.target, 1e-3, 1e-3)) << step;
    // Nearest-neighbour masks may differ where a coordinate rounds differently in float32.
    EXPECT_LT((a.mask != b.mask).sum().item<int64_t>(), a.mask.numel() / 100 + 1) << step;
  }
}

}  // namespace
}  // namespace u3d

namespace u3d {
namespace {

// next_batch() at a seeked cursor gives batch(step) and moves on by one on the device (what a
// captured graph replays); a seek to another epoch uploads that epoch's case order into the same
// buffer.
TEST(DeviceSampler, CursorBatchesEqualTheIndexedBatchesAcrossEpochs) {
  const StackedCache cache = mixed_cache(/*segmentation=*/true);
  SamplerOptions o = loader_options();
  o.augment.flip_axes = {0, 1, 2};
  o.augment.intensity_prob = 0.5;
  const PatchSampler host(cache, o);
  DeviceSampler cursor(host), indexed(host);
  std::string why;
  EXPECT_TRUE(cursor.capturable(&why)) << why;
  cursor.seek(/*epoch=*/2, /*step=*/1, /*steps_per_epoch=*/5);
  indexed.set_epoch(2, 5);
  for (int64_t step = 1; step < 5; ++step) {
    if (step == 3) cursor.seek(2, 3, 5);  // in sequence: no device write, same result
    test::expect_same_batch(cursor.next_batch(), indexed.batch(step), "epoch 2 step " + std::to_string(step));
  }
  cursor.seek(3, 0, 5);
  indexed.set_epoch(3, 5);
  test::expect_same_batch(cursor.next_batch(), indexed.batch(0), "epoch 3 step 0");
  cursor.seek(3, 4, 5);  // out of sequence (a resume): the cursor is written
  test::expect_same_batch(cursor.next_batch(), indexed.batch(4), "epoch 3 step 4");

  o.augment.noise_prob = 0.5;  // noise is seeded on the host per batch: not capturable
  const PatchSampler noisy(cache, o);
  EXPECT_FALSE(DeviceSampler(noisy).capturable(&why));
  EXPECT_NE(why.find("noise"), std::string::npos);
}

}  // namespace
}  // namespace u3d
