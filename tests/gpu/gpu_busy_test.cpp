// The GPU busy share of an epoch (train/gpu_busy.h) on a real device: metrics.csv's gpu_busy is a
// share in (0, 1] on CUDA, the epoch line and the progress lines show it, and a run whose sampler is
// slowed down (U3D_TEST_FAULTS slow_step: a sleep as each batch is drawn, outside the step's events)
// reports a lower share than the same run without it, with the note that names the data wait.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"

namespace u3d {
namespace {

class GpuBusy : public test::CudaTest {
 protected:
  // The mean gpu_busy of the run's epochs; every row's value is a share in (0, 1].
  double mean_share(const std::string& name) {
    const auto rows = test::read_csv(dir / "runs" / name / "metrics.csv");
    EXPECT_EQ(rows.size(), 2u);
    double sum = 0;
    for (const auto& row : rows) {
      EXPECT_FALSE(row.at("gpu_busy").empty()) << name << " epoch " << row.at("epoch");
      const double share = row.at("gpu_busy").empty() ? 0.0 : std::stod(row.at("gpu_busy"));
      EXPECT_GT(share, 0.0);
      EXPECT_LE(share, 1.0);
      sum += share;
    }
    return rows.empty() ? 0.0 : sum / static_cast<double>(rows.size());
  }
};

TEST_F(GpuBusy, ShareIsMeasuredOnCudaAndFallsWhenTheSamplerIsSlow) {
  phantom(8, 32, {"fast", "slow"});
  const std::vector<std::string> cuda = {
      "--set", "training.device=cuda",        "--set", "training.steps_per_epoch=12",
      "--set", "logging.progress=lines",      "--set", "logging.progress_seconds=0.001",
      "--set", "training.deterministic=false"};
  auto args = [&](const std::string& name) {
    std::vector<std::string> a = {"--config", name + ".yaml"};
    a.insert(a.end(), cuda.begin(), cuda.end());
    return a;
  };
  const auto fast = trainer(args("fast"));
  ASSERT_EQ(fast.exit_code, 0) << fast.output;
  EXPECT_NE(fast.output.find(", gpu "), std::string::npos) << fast.output;  // the epoch and progress lines

  test::ProcessOptions slowed;
  slowed.env["U3D_TEST_FAULTS"] = "slow_step@150";
  test::TrainerProcess slow(args("slow"), dir.path(), slowed);
  ASSERT_EQ(slow.wait(/*timeout_seconds=*/300), 0) << slow.output();
  const double fast_share = mean_share("fast"), slow_share = mean_share("slow");
  EXPECT_LT(slow_share, fast_share) << "slow " << slow_share << ", fast " << fast_share;
  EXPECT_LT(slow_share, 0.5) << "150 ms of sleep per tiny step leaves the GPU mostly idle";
  EXPECT_NE(slow.output().find("GPU idle"), std::string::npos) << slow.output();
  EXPECT_NE(slow.output().find("data wait"), std::string::npos) << slow.output();
}

}  // namespace
}  // namespace u3d
