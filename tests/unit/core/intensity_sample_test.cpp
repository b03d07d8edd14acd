// core/intensity_sample.h: the weighted pooled statistics are those of the virtual sample in which
// each value is repeated `weight` times (numpy's mean, np.std and linear percentiles), and the pick
// is nnU-Net's count: every foreground voxel once (weight draws / count) or `draws` with replacement.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "u3d/core/intensity_sample.h"
#include "u3d/core/stats.h"

namespace u3d {
namespace {

TEST(IntensitySample, WeightedStatisticsAreThoseOfTheRepeatedSample) {
  // Case a: 3 values drawn 4 times each on average; case b: 2 values drawn 6 times each.
  const std::vector<WeightedValues> cases = {{{2.f, 0.f, 1.f}, 4.0}, {{20.f, 10.f}, 6.0}};
  std::vector<double> expanded;
  for (const auto& c : cases) {
    for (float v : c.values) {
      for (int r = 0; r < static_cast<int>(c.weight); ++r) expanded.push_back(v);
    }
  }
  double mean = 0;
  for (double v : expanded) mean += v;
  mean /= static_cast<double>(expanded.size());
  double sq = 0;
  for (double v : expanded) sq += (v - mean) * (v - mean);
  const IntensityStats s = weighted_intensity_stats(cases);
  EXPECT_NEAR(s.mean, mean, 1e-12);
  EXPECT_NEAR(s.std, std::sqrt(sq / static_cast<double>(expanded.size())), 1e-12);
  EXPECT_NEAR(s.p00_5, percentile(expanded, 0.5), 1e-9);
  EXPECT_NEAR(s.median, percentile(expanded, 50.0), 1e-9);
  EXPECT_NEAR(s.p99_5, percentile(expanded, 99.5), 1e-9);
  // 24 virtual values, sorted 0 x4, 1 x4, 2 x4, 10 x6, 20 x6: the median is halfway between the
  // 12th (2) and the 13th (10).
  EXPECT_DOUBLE_EQ(s.median, 6.0);
}

TEST(IntensitySample, UnitWeightsGiveNumpysPercentiles) {
  std::vector<float> v;
  std::vector<double> d;
  for (int i = 0; i < 1000; ++i) {
    const float x = static_cast<float>((i * 37) % 1001) - 300.f;
    v.push_back(x);
    d.push_back(x);
  }
  const IntensityStats s = weighted_intensity_stats({{v, 1.0}});
  EXPECT_NEAR(s.p00_5, percentile(d, 0.5), 1e-9);
  EXPECT_NEAR(s.median, percentile(d, 50.0), 1e-9);
  EXPECT_NEAR(s.p99_5, percentile(d, 99.5), 1e-9);
  EXPECT_EQ(s.values, 1000);
}

TEST(IntensitySample, EveryCaseWeighsTheSameWhateverItsForegroundSize) {
  // A large case of value 0 and a small case of value 100: nnU-Net's draw takes as many from each.
  const int64_t draws = foreground_draws_per_case(2);
  EXPECT_EQ(draws, 50000000);
  const SamplePick big = foreground_pick(90000, draws, "big");
  const SamplePick small = foreground_pick(10, draws, "small");
  const IntensityStats s =
      weighted_intensity_stats({{std::vector<float>(big.positions.size(), 0.f), big.weight},
                                {std::vector<float>(small.positions.size(), 100.f), small.weight}});
  EXPECT_NEAR(s.mean, 50.0, 1e-9);
  EXPECT_NEAR(s.std, 50.0, 1e-9);
}

TEST(IntensitySample, PickTakesEveryVoxelOnceOrDrawsWithReplacement) {
  const SamplePick all = foreground_pick(5, 20, "case_a");
  EXPECT_EQ(all.positions, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(all.weight, 4.0);
  const SamplePick drawn = foreground_pick(1000, 300, "case_a");
  ASSERT_EQ(drawn.positions.size(), 300u);
  EXPECT_DOUBLE_EQ(drawn.weight, 1.0);
  std::set<int64_t> distinct(drawn.positions.begin(), drawn.positions.end());
  EXPECT_LT(distinct.size(), 300u);  // with replacement: 300 draws from 1000 repeat some (p > 0.99999)
  for (int64_t p : drawn.positions) {
    EXPECT_GE(p, 0);
    EXPECT_LT(p, 1000);
  }
  EXPECT_EQ(foreground_pick(1000, 300, "case_a").positions, drawn.positions);  // seeded by the id
  EXPECT_NE(foreground_pick(1000, 300, "case_b").positions, drawn.positions);
  EXPECT_TRUE(foreground_pick(0, 300, "case_a").positions.empty());
  EXPECT_EQ(foreground_draws_per_case(12), 8333333);
}

}  // namespace
}  // namespace u3d
