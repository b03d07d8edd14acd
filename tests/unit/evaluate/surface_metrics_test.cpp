#include "u3d/evaluate/surface_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "u3d/core/errors.h"
#include "u3d/evaluate/segmentation_eval.h"

namespace u3d {
namespace {

// A (n, n, n) uint8 mask from a predicate of voxel coordinates.
torch::Tensor make_mask(int64_t n, const std::function<bool(double, double, double)>& inside) {
  auto m = torch::zeros({n, n, n}, torch::kUInt8);
  auto a = m.accessor<uint8_t, 3>();
  for (int64_t z = 0; z < n; ++z) {
    for (int64_t y = 0; y < n; ++y) {
      for (int64_t x = 0; x < n; ++x) a[z][y][x] = inside(z, y, x) ? 1 : 0;
    }
  }
  return m;
}

torch::Tensor ball(int64_t n, double c, double r) {
  return make_mask(n, [=](double z, double y, double x) {
    return (z - c) * (z - c) + (y - c) * (y - c) + (x - c) * (x - c) <= r * r;
  });
}

// Solid torus around the z axis through (c, c, c): ring radius big_r, tube radius r.
torch::Tensor solid_torus(int64_t n, double c, double big_r, double r) {
  return make_mask(n, [=](double z, double y, double x) {
    const double ring = std::hypot(y - c, x - c) - big_r;
    return ring * ring + (z - c) * (z - c) <= r * r;
  });
}

using Betti = std::array<int64_t, 3>;

TEST(SurfaceMetrics, BettiOfSolidsAndShells) {
  for (auto topology : {DigitalTopology::kFg26, DigitalTopology::kFg6}) {
    SCOPED_TRACE(topology == DigitalTopology::kFg26 ? "fg26" : "fg6");
    const auto solid = ball(28, 13.5, 10.0);
    EXPECT_EQ(betti_numbers(solid, topology), (Betti{1, 0, 0}));
    const auto shell = solid.logical_and(ball(28, 13.5, 7.0).logical_not()).to(torch::kUInt8);
    EXPECT_EQ(betti_numbers(shell, topology), (Betti{1, 0, 1}));
    EXPECT_EQ(betti_numbers(solid_torus(32, 15.5, 9.0, 3.5), topology), (Betti{1, 1, 0}));
    const auto torus_shell =
        solid_torus(32, 15.5, 9.0, 4.5).logical_and(solid_torus(32, 15.5, 9.0, 2.5).logical_not()).to(torch::kUInt8);
    EXPECT_EQ(betti_numbers(torus_shell, topology), (Betti{1, 2, 1}));
    EXPECT_EQ(betti_numbers(torch::zeros({8, 8, 8}, torch::kUInt8), topology), (Betti{0, 0, 0}));
    EXPECT_EQ(euler_characteristic(torus_shell, topology), 0);
  }
}

TEST(SurfaceMetrics, BettiOfBlocksSheetsAndBorders) {
  const auto blocks = make_mask(16, [](double z, double y, double x) {
    return y >= 2 && y < 8 && x >= 2 && x < 8 && ((z >= 1 && z < 5) || (z >= 8 && z < 12));
  });
  EXPECT_EQ(betti_numbers(blocks), (Betti{2, 0, 0}));
  // Two sheets that meet only along an edge (z = 5, x <= 7 and z = 6, x >= 8): one 26-component,
  // two 6-components.
  const auto sheets =
      make_mask(16, [](double z, double, double x) { return (z == 5 && x <= 7) || (z == 6 && x >= 8); });
  EXPECT_EQ(betti_numbers(sheets, DigitalTopology::kFg26), (Betti{1, 0, 0}));
  EXPECT_EQ(betti_numbers(sheets, DigitalTopology::kFg6), (Betti{2, 0, 0}));
  // A diagonal ring (voxels touching at corners only) is a loop for 26-connectivity only.
  const auto diamond =
      make_mask(16, [](double z, double y, double x) { return z == 4 && std::abs(y - 8) + std::abs(x - 8) == 4; });
  EXPECT_EQ(betti_numbers(diamond, DigitalTopology::kFg26), (Betti{1, 1, 0}));
  EXPECT_EQ(betti_numbers(diamond, DigitalTopology::kFg6), (Betti{16, 0, 0}));
  // Outside the volume is background, so a hollow box whose walls are the volume border encloses
  // one cavity.
  const auto hollow = make_mask(
      10, [](double z, double y, double x) { return z == 0 || z == 9 || y == 0 || y == 9 || x == 0 || x == 9; });
  EXPECT_EQ(betti_numbers(hollow), (Betti{1, 0, 1}));
  // An open box (no lid) has no cavity.
  const auto open =
      make_mask(10, [](double z, double y, double x) { return z == 0 || y == 0 || y == 9 || x == 0 || x == 9; });
  EXPECT_EQ(betti_numbers(open), (Betti{1, 0, 0}));
}

TEST(SurfaceMetrics, ComponentLabelsAreCompactAndConnectivityAware) {
  const auto pair = make_mask(
      6, [](double z, double y, double x) { return (z == 1 && y == 1 && x == 1) || (z == 2 && y == 2 && x == 2); });
  EXPECT_EQ(label_components(pair, 26).count, 1);
  const auto six = label_components(pair, 6);
  EXPECT_EQ(six.count, 2);
  EXPECT_EQ(six.labels[1][1][1].item<int32_t>(), 1);
  EXPECT_EQ(six.labels[2][2][2].item<int32_t>(), 2);
  EXPECT_EQ(six.labels[0][0][0].item<int32_t>(), 0);
  EXPECT_THROW(label_components(pair, 18), DataError);
}

// A 24^3 volume holding a 4 x 16 x 16 slab: D in [z0, z0 + 4), H and W in [4, 20).
torch::Tensor slab(int64_t z0) {
  auto m = torch::zeros({24, 24, 24}, torch::kUInt8);
  m.slice(0, z0, z0 + 4).slice(1, 4, 20).slice(2, 4, 20).fill_(1);
  return m;
}

TEST(SurfaceMetrics, SurfaceDiceByHand) {
  const auto ref = slab(8);
  EXPECT_DOUBLE_EQ(surface_dice(ref, ref, 0.0), 1.0);
  const auto shifted = slab(9);
  EXPECT_DOUBLE_EQ(surface_dice(shifted, ref, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(surface_dice(shifted, ref, 1.0), 1.0);
  // Each surface has 2 * 256 cap voxels and 2 * 60 ring voxels (1264 in all); at distance 0 only
  // the rings of the shared layers and the rings that lie in the other's cap: 3 * 60 per side.
  EXPECT_DOUBLE_EQ(surface_dice(shifted, ref, 0.5), 360.0 / 1264.0);
  const auto corner = make_mask(24, [](double z, double y, double x) { return z < 3 && y < 3 && x < 3; });
  const auto far = make_mask(24, [](double z, double y, double x) { return z > 20 && y > 20 && x > 20; });
  EXPECT_DOUBLE_EQ(surface_dice(corner, far, 2.0), 0.0);
  const auto empty = torch::zeros({24, 24, 24}, torch::kUInt8);
  EXPECT_DOUBLE_EQ(surface_dice(empty, empty, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(surface_dice(corner, empty, 2.0), 0.0);
  EXPECT_THROW(surface_dice(corner, torch::zeros({24, 24, 23}, torch::kUInt8), 2.0), DataError);
}

TEST(SurfaceMetrics, VariationOfInformationByHand) {
  const auto ref = make_mask(
      16, [](double z, double y, double x) { return z >= 2 && z < 6 && y >= 2 && y < 6 && x >= 2 && x < 12; });
  const auto same = variation_of_information(ref, ref);
  EXPECT_DOUBLE_EQ(same.total(), 0.0);
  EXPECT_DOUBLE_EQ(voi_score(same.total()), 1.0);
  // The prediction cuts the 10-voxel-long block into 4 + (2 missing) + 4: over the union (the
  // reference block) the prediction labels have the distribution (0.4, 0.2, 0.4).
  const auto cut =
      ref.logical_and(make_mask(16, [](double, double, double x) { return x < 6 || x >= 8; })).to(torch::kUInt8);
  const double expected = -(2 * 0.4 * std::log2(0.4) + 0.2 * std::log2(0.2));
  const auto split = variation_of_information(cut, ref);
  EXPECT_NEAR(split.split, expected, 1e-12);
  EXPECT_NEAR(split.merge, 0.0, 1e-12);
  const auto merge = variation_of_information(ref, cut);
  EXPECT_NEAR(merge.merge, expected, 1e-12);
  EXPECT_NEAR(merge.split, 0.0, 1e-12);
  EXPECT_NEAR(voi_score(expected), 1.0 / (1.0 + 0.3 * expected), 1e-15);
  const auto empty = torch::zeros({16, 16, 16}, torch::kUInt8);
  EXPECT_DOUBLE_EQ(variation_of_information(empty, empty).total(), 0.0);
}

TEST(SurfaceMetrics, TopoScoreFromCounts) {
  EXPECT_DOUBLE_EQ(topo_score({}), 1.0);
  EXPECT_DOUBLE_EQ(topo_score({{1, 0, 0}, {1, 0, 0}, {1, 0, 0}}), 1.0);
  EXPECT_DOUBLE_EQ(topo_score({{2, 0, 0}, {1, 0, 0}, {1, 0, 0}}), 2.0 / 3.0);
  // Dimension 1 only in the prediction: 0.5 / (1 + 0.5); weights renormalised over dims 0 and 1.
  EXPECT_DOUBLE_EQ(topo_score({{1, 1, 0}, {1, 0, 0}, {1, 0, 0}}), (0.34 * 1.0 + 0.33 / 3.0) / 0.67);
  // A ball through the centre has one component in each of the 8 octant tiles.
  const auto b = ball(20, 9.5, 6.0);
  const auto counts = topology_counts(b, b);
  EXPECT_EQ(counts.pred, (Betti{8, 0, 0}));
  EXPECT_EQ(counts.matched, (Betti{8, 0, 0}));
  EXPECT_EQ(topology_counts(b, b, /*tiles_per_axis=*/1).pred, (Betti{1, 0, 0}));
}

TEST(SurfaceMetrics, ScoreSurfaceIdenticalAndShape) {
  const auto shell = ball(24, 11.5, 9.0).logical_and(ball(24, 11.5, 6.0).logical_not()).to(torch::kUInt8);
  const auto s = score_surface(shell, shell);
  EXPECT_DOUBLE_EQ(s.surface_dice, 1.0);
  EXPECT_DOUBLE_EQ(s.voi, 0.0);
  EXPECT_DOUBLE_EQ(s.topo_score, 1.0);
  EXPECT_DOUBLE_EQ(s.total, 1.0);
  EXPECT_EQ(s.betti_ref, (Betti{1, 0, 1}));
  try {
    score_surface(shell, torch::zeros({24, 24, 25}, torch::kUInt8));
    FAIL() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("24x24x24"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("24x24x25"), std::string::npos) << e.what();
  }
  EXPECT_THROW(score_surface(shell * 255, shell), DataError);
}

TEST(SurfaceMetrics, IgnoredVoxelsChangeNothing) {
  auto ref = slab(8);
  const auto ignored = make_mask(24, [](double, double y, double) { return y >= 12; });
  ref.masked_fill_(ignored.to(torch::kBool), 2);
  const auto pred = slab(9);
  // A prediction that differs from `pred` only where the reference is ignored: noise blobs.
  auto noisy = pred.clone();
  noisy.masked_fill_(
      make_mask(24, [](double z, double y, double x) { return y >= 14 && (int(z + x) % 5 == 0); }).to(torch::kBool), 1);
  const auto a = score_surface(pred, ref);
  const auto b = score_surface(noisy, ref);
  EXPECT_DOUBLE_EQ(a.surface_dice, b.surface_dice);
  EXPECT_DOUBLE_EQ(a.voi, b.voi);
  EXPECT_EQ(a.betti_pred, b.betti_pred);
  EXPECT_DOUBLE_EQ(a.topo_score, b.topo_score);
  EXPECT_DOUBLE_EQ(a.total, b.total);
  // Not ignoring: the noise counts, and a reference value 2 is then an error.
  EXPECT_THROW(score_surface(pred, ref, 2.0, std::nullopt), DataError);
  const auto clean_ref = ref.masked_fill(ref.eq(2), 0);
  EXPECT_NE(score_surface(noisy, clean_ref, 2.0, std::nullopt).voi,
            score_surface(pred, clean_ref, 2.0, std::nullopt).voi);
  // Ignoring equals zeroing the ignored voxels in both volumes by hand.
  const auto zeroed = score_surface(noisy.masked_fill(ignored.to(torch::kBool), 0), clean_ref, 2.0, std::nullopt);
  EXPECT_DOUBLE_EQ(zeroed.total, b.total);
}

// Labels are checked in their own type: 256, -1 and a reference 258 are refused as those values;
// an ignore label a uint8 reference cannot hold matches no voxel (never 258 as 2).
TEST(SurfaceMetrics, LabelsAreCheckedInTheirOwnType) {
  const auto sheet = ball(12, 5.5, 4.0);
  auto message = [](const torch::Tensor& pred, const torch::Tensor& ref, std::optional<int64_t> ignore) {
    try {
      score_surface(pred, ref, 2.0, ignore);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto wide = sheet.to(torch::kInt16);
  EXPECT_EQ(message(wide * 256, wide, 2), "score_surface: prediction holds the value 256, expected 0 or 1");
  EXPECT_EQ(message(wide.masked_fill(wide.eq(0), -1), wide, 2),
            "score_surface: prediction holds the value -1, expected 0 or 1");
  EXPECT_EQ(message(wide, wide.masked_fill(wide.eq(0), 258), 2),
            "score_surface: reference holds the value 258, expected 0, 1 or the ignore label 2");
  // A uint8 reference holding 2 with ignore label 258: 2 is an error, not ignored.
  EXPECT_EQ(message(sheet, sheet.masked_fill(sheet.eq(0), 2), 258),
            "score_surface: reference holds the value 2, expected 0, 1 or the ignore label 258");
  EXPECT_EQ(message(wide, wide.masked_fill(wide.eq(0), 258), 258), "no error");
  // label_equals: the value in the tensor's own terms.
  const auto bytes = torch::tensor({0, 2, 255}, torch::kUInt8);
  EXPECT_FALSE(label_equals(bytes, 258).any().item<bool>());
  EXPECT_FALSE(label_equals(bytes, -1).any().item<bool>());
  EXPECT_TRUE(label_equals(bytes, 255)[2].item<bool>());
  EXPECT_TRUE(label_equals(torch::tensor({0.0, 258.0}), 258)[1].item<bool>());
}

}  // namespace
}  // namespace u3d
