#include "u3d/core/intensity_sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "u3d/core/rng.h"
#include "u3d/core/sha256.h"
#include "u3d/core/stats.h"

namespace u3d {

int64_t foreground_draws_per_case(int64_t cases) {
  return std::max<int64_t>(1,
                           static_cast<int64_t>(kForegroundDraws / static_cast<double>(std::max<int64_t>(1, cases))));
}

SamplePick foreground_pick(int64_t count, int64_t draws, const std::string& case_id) {
  SamplePick pick;
  if (count <= 0) return pick;
  if (count <= draws) {
    pick.positions.resize(static_cast<size_t>(count));
    std::iota(pick.positions.begin(), pick.positions.end(), int64_t{0});
    pick.weight = static_cast<double>(draws) / static_cast<double>(count);
    return pick;
  }
  Rng rng(kSampleSeed, std::stoull(sha256_hex(case_id).substr(0, 16), nullptr, 16));
  pick.positions.resize(static_cast<size_t>(draws));
  for (auto& p : pick.positions) p = rng.uniform_int(count);
  return pick;
}

IntensityStats weighted_intensity_stats(const std::vector<WeightedValues>& cases) {
  IntensityStats s;
  // (value, case): 8 bytes per value, so nnU-Net's 1e8 values take 800 MB here (its own pool: 400 MB).
  std::vector<std::pair<float, uint32_t>> all;
  size_t count = 0;
  for (const auto& c : cases) count += c.values.size();
  all.reserve(count);
  double total = 0, sum = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (float v : cases[i].values) {
      all.emplace_back(v, static_cast<uint32_t>(i));
      sum += cases[i].weight * v;
    }
    total += cases[i].weight * static_cast<double>(cases[i].values.size());
  }
  s.values = static_cast<int64_t>(all.size());
  if (all.empty() || !(total > 0)) return s;
  s.mean = sum / total;
  double sq = 0;
  for (const auto& [v, i] : all) sq += cases[i].weight * (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / total);
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // numpy's linear percentile over the virtual sample of `total` values, in which value i fills the
  // virtual positions [start_i, start_i + weight_i).
  auto at = [&](double q) {
    const double h = (std::max(total, 1.0) - 1.0) * std::clamp(q, 0.0, 100.0) / 100.0;
    const double lo_pos = std::floor(h), t = h - lo_pos;
    double lo = all.back().first, hi = all.back().first, start = 0;
    bool have_lo = false;
    for (const auto& [v, i] : all) {
      const double end = start + cases[i].weight;
      if (!have_lo && lo_pos < end) {
        lo = v;
        have_lo = true;
      }
      if (lo_pos + 1 < end) {
        hi = v;
        break;
      }
      start = end;
    }
    return percentile_lerp(lo, hi, t);
  };
  s.p00_5 = at(0.5);
  s.median = at(50.0);
  s.p99_5 = at(99.5);
  return s;
}

}  // namespace u3d
