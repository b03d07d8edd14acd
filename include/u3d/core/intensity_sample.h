// nnU-Net's foreground intensity statistics, one rule for the importers (at the images' native
// resolution) and the fingerprint (plan/fingerprint.h). nnU-Net 2.x (DatasetFingerprintExtractor)
// draws 1e8 / (number of cases) foreground voxels per case with replacement, so every case weighs
// the same in the pooled statistics whatever its foreground size, and takes the mean, the standard
// deviation and numpy's percentiles of the pooled draws. We take the expectation of that draw where
// it is cheap and the draw itself where it is not:
//   - a case with at most `draws` foreground voxels contributes each of them once, with weight
//     draws / count (the number of times each is drawn, on average);
//   - a case with more draws `draws` of them with replacement (a generator seeded with kSampleSeed
//     and the case's id), weight 1 each.
// So the pooled sample holds at most 1e8 values, as nnU-Net's, and the statistics are nnU-Net's up
// to its own sampling noise.
//
//   const SamplePick pick = foreground_pick(n_foreground, foreground_draws_per_case(cases), case_id);
//   // values of a channel at foreground positions pick.positions -> WeightedValues{values, pick.weight}
//   const IntensityStats s = weighted_intensity_stats(per_case_values);
//
// Values are raw intensities (e.g. HU); percentiles follow core/stats.h's numpy convention over the
// virtual sample in which each value is repeated `weight` times.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace u3d {

inline constexpr double kForegroundDraws = 1e8;  // nnU-Net's num_foreground_voxels_for_intensitystats
inline constexpr uint64_t kSampleSeed = 1234;    // nnU-Net's seed of the draw

// 1e8 / cases, at least 1.
int64_t foreground_draws_per_case(int64_t cases);

// Which of a case's `count` foreground voxels (positions 0 .. count - 1 in its foreground list) enter
// the sample, and the weight each carries (the rule above).
struct SamplePick {
  std::vector<int64_t> positions;
  double weight = 1;
};
SamplePick foreground_pick(int64_t count, int64_t draws, const std::string& case_id);

// One case's sample of one channel: its values, each with the same weight.
struct WeightedValues {
  std::vector<float> values;
  double weight = 1;
};

struct IntensityStats {
  double mean = 0, std = 0;  // population standard deviation, as numpy's np.std
  double p00_5 = 0, median = 0, p99_5 = 0;
  int64_t values = 0;  // values held (not the weighted count)
};
// The pooled statistics; all 0 for no values.
IntensityStats weighted_intensity_stats(const std::vector<WeightedValues>& cases);

}  // namespace u3d
