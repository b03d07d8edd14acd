// GPU tests for the hot-path reads and copies of issue 40: the step monitor's asynchronous snapshot
// (a page-locked copy and a CUDA event, equal to the synchronous read once the device is done) and
// the page-locked validation cache (asynchronous copies to the GPU). Each asserts what only the
// CUDA path produces (a tensor on the device, page-locked host memory). Every test skips itself
// where no CUDA device is present.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "devices.h"
#include "u3d/data/cache.h"
#include "u3d/train/step_monitor.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

using test::kCuda;

TEST(HotPathGpu, StepMonitorSnapshotEqualsTheSynchronousReadOnceTheDeviceIsDone) {
  U3D_REQUIRE_CUDA();
  StepMonitor m(kCuda, /*terms=*/2);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(kCuda);
  for (int i = 0; i < 5; ++i) {
    const torch::Tensor skip = torch::full({}, i == 2 ? 1.0 : 0.0, f32);
    m.record(torch::full({}, 0.5 * (i + 1), f32), skip, torch::tensor({0.25f, 1.0f}, f32) * (i + 1));
  }
  m.request(/*steps=*/5);
  m.record(torch::full({}, 100.0, f32), torch::zeros({}, f32), torch::tensor({1.0f, 1.0f}, f32));  // after it
  torch::cuda::synchronize();
  const StepMonitor::Snapshot s = m.latest();  // the copy has completed: taken without a wait
  EXPECT_EQ(s.steps, 5);
  EXPECT_DOUBLE_EQ(s.totals.loss_sum, 0.5 * (1 + 2 + 4 + 5));
  EXPECT_EQ(s.totals.term_sums, (std::vector<double>{0.25 * 12, 1.0 * 12}));
  EXPECT_EQ(s.totals.skipped, 1);
  EXPECT_EQ(s.totals.longest_run, 1);
  m.request(/*steps=*/6);
  torch::cuda::synchronize();
  const StepMonitor::Snapshot now = m.latest();
  const StepMonitor::Totals t = m.totals();  // the synchronous read
  EXPECT_EQ(now.steps, 6);
  EXPECT_EQ(now.totals.loss_sum, t.loss_sum);
  EXPECT_EQ(now.totals.term_sums, t.term_sums);
  EXPECT_EQ(now.totals.skipped, t.skipped);
  EXPECT_EQ(now.totals.skipped_total, t.skipped_total);
  EXPECT_EQ(now.totals.skipped_in_a_row, t.skipped_in_a_row);
  EXPECT_EQ(now.totals.longest_run, t.longest_run);
  // A snapshot requested in an ended epoch never shows in the next one.
  m.request(/*steps=*/7);
  m.start_epoch();
  torch::cuda::synchronize();
  EXPECT_EQ(m.latest().steps, 0);
  EXPECT_DOUBLE_EQ(m.latest().totals.loss_sum, 0.0);
}

TEST(HotPathGpu, ValidationCacheIsPageLocked) {
  U3D_REQUIRE_CUDA();
  std::vector<CachedCase> cases;
  for (int i = 0; i < 2; ++i) {
    CachedCase c;
    c.id = "case" + std::to_string(i);
    c.image = torch::randn({2, 6, 7, 8});
    c.target = torch::rand({1, 6, 7, 8});
    c.mask = torch::ones({1, 6, 7, 8}, torch::kUInt8);
    c.raw_target = c.target[0] * 70;
    cases.push_back(c);
  }
  TensorCache cache(cases);
  const StackedCache stacked = cache.stack_shared(/*label_maps=*/{}, CachePlacement::kPinned);
  EXPECT_TRUE(stacked.image_fields().front().arena.is_pinned());
  cache.pin_memory();
  for (const CachedCase& c : cache.cases()) {
    EXPECT_TRUE(c.image.is_pinned()) << c.id;
    EXPECT_TRUE(c.target.is_pinned()) << c.id;
    EXPECT_TRUE(c.mask.is_pinned()) << c.id;
    EXPECT_TRUE(c.raw_target.is_pinned()) << c.id;
  }
  for (size_t i = 0; i < cases.size(); ++i) {  // the values do not change
    EXPECT_TRUE(torch::equal(cache[static_cast<int64_t>(i)].image, cases[i].image));
    EXPECT_TRUE(torch::equal(cache[static_cast<int64_t>(i)].raw_target, cases[i].raw_target));
  }
  // The stacked views stay views into the page-locked arena (no second copy).
  EXPECT_EQ(cache[0].image.data_ptr(), stacked.image_fields().front().arena.data_ptr());
  const torch::Tensor on_gpu = cache[1].image.to(kCuda, /*non_blocking=*/true);
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(on_gpu.cpu(), cases[1].image));
}

}  // namespace
}  // namespace u3d
