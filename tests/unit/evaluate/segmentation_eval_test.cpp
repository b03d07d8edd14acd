// Dice and HD95 against hand-computed cases, the distance transform against brute force, and the
// folder evaluation behind `trainer evaluate segmentation`.
#include <gtest/gtest.h>

#include <cmath>

#include "nifti_support.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/evaluate/segmentation_eval.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

torch::Tensor empty_mask(int64_t d, int64_t h, int64_t w) { return torch::zeros({d, h, w}, torch::kBool); }

TEST(SegmentationEval, DiceByHand) {
  auto a = empty_mask(1, 4, 4), b = empty_mask(1, 4, 4);
  a.slice(1, 0, 2).fill_(true);  // 8 voxels
  b.slice(1, 1, 4).fill_(true);  // 12 voxels, 4 shared
  EXPECT_DOUBLE_EQ(dice_score(a, b), 2.0 * 4 / (8 + 12));
  EXPECT_DOUBLE_EQ(dice_score(a, a), 1.0);
  EXPECT_TRUE(std::isnan(dice_score(empty_mask(2, 2, 2), empty_mask(2, 2, 2))));
  EXPECT_DOUBLE_EQ(dice_score(a, empty_mask(1, 4, 4)), 0.0);
}

TEST(SegmentationEval, SurfaceIsTheMaskMinusItsFaceConnectedInterior) {
  auto m = empty_mask(5, 5, 5);
  m.slice(0, 1, 4).slice(1, 1, 4).slice(2, 1, 4).fill_(true);  // 3^3 cube: 26 surface voxels, 1 interior
  const auto s = surface_voxels(m);
  EXPECT_EQ(s.sum().item<int64_t>(), 26);
  EXPECT_FALSE(s[2][2][2].item<bool>());
  // The volume border counts as outside: a full volume is all surface but its interior.
  EXPECT_EQ(surface_voxels(torch::ones({3, 3, 3}, torch::kBool)).sum().item<int64_t>(), 26);
}

TEST(SegmentationEval, DistanceTransformMatchesBruteForceWithSpacing) {
  torch::manual_seed(3);
  const auto features = torch::rand({7, 9, 11}) > 0.97;
  ASSERT_GT(features.sum().item<int64_t>(), 0);
  const std::array<double, 3> spacing{2.5, 0.7, 1.3};
  const auto dt = distance_transform(features, spacing);
  const auto idx = features.nonzero().to(torch::kDouble);  // (n, 3)
  const auto sp = torch::tensor({spacing[0], spacing[1], spacing[2]}, torch::kDouble);
  for (int64_t z = 0; z < 7; z += 2) {
    for (int64_t y = 0; y < 9; y += 2) {
      for (int64_t x = 0; x < 11; x += 3) {
        const auto p =
            torch::tensor({static_cast<double>(z), static_cast<double>(y), static_cast<double>(x)}, torch::kDouble);
        const double brute = ((idx - p) * sp).square().sum(1).sqrt().min().item<double>();
        EXPECT_NEAR(dt[z][y][x].item<double>(), brute, 1e-9) << z << "," << y << "," << x;
      }
    }
  }
  EXPECT_TRUE(torch::isinf(distance_transform(empty_mask(2, 3, 4), spacing)).all().item<bool>());
}

TEST(SegmentationEval, Hd95ByHand) {
  // Two single voxels 3 voxels apart along W with 2 mm voxels: 6 mm both ways.
  auto a = empty_mask(1, 1, 8), b = empty_mask(1, 1, 8);
  a[0][0][1] = true;
  b[0][0][4] = true;
  EXPECT_DOUBLE_EQ(hausdorff95(a, b, {1.0, 1.0, 2.0}), 6.0);
  // A line of 20 voxels, and the same line plus two voxels at x = 38, 39 (0.5 mm along W). Every
  // voxel of a 1-voxel line is surface. a -> b: 20 zeros. b -> a: 20 zeros, 19 and 20 voxels:
  // sorted 22 values, rank 0.95 * 21 = 19.95 between v[19] = 0 and v[20] = 19 -> 18.05 voxels.
  auto line = empty_mask(1, 1, 40), more = empty_mask(1, 1, 40);
  line.slice(2, 0, 20).fill_(true);
  more.slice(2, 0, 20).fill_(true);
  more[0][0][38] = true;
  more[0][0][39] = true;
  EXPECT_NEAR(hausdorff95(line, more, {1.0, 1.0, 0.5}), 18.05 * 0.5, 1e-9);
  EXPECT_NEAR(hausdorff95(more, line, {1.0, 1.0, 0.5}), 18.05 * 0.5, 1e-9);  // symmetric
  EXPECT_DOUBLE_EQ(hausdorff95(line, line, {1, 1, 1}), 0.0);
  EXPECT_TRUE(std::isnan(hausdorff95(empty_mask(2, 2, 2), empty_mask(2, 2, 2), {1, 1, 1})));
  EXPECT_TRUE(std::isinf(hausdorff95(line, empty_mask(1, 1, 40), {1, 1, 1})));
}

TEST(SegmentationEval, Hd95OfShiftedCubesUsesSurfacesOnly) {
  // Two 4^3 cubes, one shifted by 2 voxels along D (3 mm voxels): every surface voxel of one is at
  // most 2 voxels from the other's surface, and more than 5% of them are exactly 2 away (the far
  // faces), so HD95 = 6 mm; the interior never counts.
  auto a = empty_mask(10, 8, 8), b = empty_mask(10, 8, 8);
  a.slice(0, 1, 5).slice(1, 2, 6).slice(2, 2, 6).fill_(true);
  b.slice(0, 3, 7).slice(1, 2, 6).slice(2, 2, 6).fill_(true);
  EXPECT_DOUBLE_EQ(hausdorff95(a, b, {3.0, 1.0, 1.0}), 6.0);
}

TEST(SegmentationEval, FoldersGiveCsvRowsAndMeans) {
  test::TempDir dir;
  fs::create_directories(dir / "ref");
  fs::create_directories(dir / "pred");
  // case a: label 1 perfect, label 2 half; case b: label 1 only in the reference.
  auto ra = torch::zeros({2, 4, 4}, torch::kUInt8), pa = ra.clone();
  ra.slice(1, 0, 2).fill_(1);
  pa.slice(1, 0, 2).fill_(1);
  ra[1].slice(0, 2, 4).fill_(2);                 // 8 voxels
  pa[1].slice(0, 2, 4).slice(1, 0, 2).fill_(2);  // 4 of them
  auto rb = torch::zeros({2, 4, 4}, torch::kUInt8), pb = rb.clone();
  rb[0][0][0] = 1;
  test::TestNifti v;
  v.pixdim = {1, 1, 2};
  for (auto [name, t] : std::vector<std::pair<std::string, torch::Tensor>>{
           {"ref/a.nii.gz", ra}, {"pred/a.nii.gz", pa}, {"ref/b.nii.gz", rb}, {"pred/b.nii", pb}}) {
    v.data = t;
    test::write_test_nifti(dir / name, v);
  }
  SegmentationEvalOptions o;
  o.reference = dir / "ref";
  o.predictions = dir / "pred";
  const auto e = evaluate_segmentation_folders(o);
  ASSERT_EQ(e.labels, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(e.cases.size(), 2u);
  EXPECT_EQ(e.cases[0].id, "a");
  EXPECT_DOUBLE_EQ(e.cases[0].scores[0].dice, 1.0);
  EXPECT_DOUBLE_EQ(e.cases[0].scores[1].dice, 2.0 * 4 / 12);
  EXPECT_DOUBLE_EQ(e.cases[1].scores[0].dice, 0.0);
  EXPECT_TRUE(std::isinf(e.cases[1].scores[0].hd95));
  EXPECT_TRUE(std::isnan(e.cases[1].scores[1].dice));  // label 2 in neither
  EXPECT_DOUBLE_EQ(e.mean_dice[0], 0.5);
  EXPECT_DOUBLE_EQ(e.mean_dice[1], 2.0 * 4 / 12);
  EXPECT_DOUBLE_EQ(e.mean_hd95[0], 0.0);  // the finite one
  EXPECT_EQ(e.infinite_hd95[0], 1);
  const std::string csv = evaluation_csv(e);
  EXPECT_NE(csv.find("case,label,name,dice,hd95_mm\n"), std::string::npos);
  EXPECT_NE(csv.find("a,1,label_1,1.000000,0.0000\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("b,1,label_1,0.000000,inf\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("mean,1,label_1,0.500000,0.0000\n"), std::string::npos) << csv;
  EXPECT_NE(evaluation_table(e).find("HD95 is inf in 1 case"), std::string::npos);
  // A prediction of another size names the file.
  v.data = torch::zeros({2, 4, 5}, torch::kUInt8);
  test::write_test_nifti(dir / "pred" / "b.nii", v);
  try {
    evaluate_segmentation_folders(o);
    FAIL() << "no error";
  } catch (const DataError& err) {
    EXPECT_NE(std::string(err.what()).find((dir / "pred" / "b.nii").string()), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace u3d
