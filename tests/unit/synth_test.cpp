#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/io/synth.h"

namespace u3d {
namespace {

TEST(Synth, SameInputsGiveTheSameCaseBitForBit) {
  const auto a = make_phantom_case(Task::kDose, {16, 20, 24}, 3, 5);
  const auto b = make_phantom_case(Task::kDose, {16, 20, 24}, 3, 5);
  const auto c = make_phantom_case(Task::kDose, {16, 20, 24}, 3, 6);
  EXPECT_TRUE(torch::equal(a.image, b.image));
  EXPECT_TRUE(torch::equal(a.target, b.target));
  EXPECT_FALSE(torch::equal(a.image, c.image));
  EXPECT_EQ(a.id, "case_005");
}

TEST(Synth, DoseCaseIsPhysicallyPlausible) {
  const auto c = make_phantom_case(Task::kDose, {32, 32, 32}, 0, 0);
  ASSERT_EQ(c.image.sizes(), (torch::IntArrayRef{5, 32, 32, 32}));
  const auto mask = c.mask.to(torch::kBool);
  EXPECT_EQ(c.target.masked_select(~mask).abs().max().item<float>(), 0.0f);  // no dose outside the body
  const auto ptv = c.image[4].to(torch::kBool);
  ASSERT_GT(ptv.sum().item<int64_t>(), 0);
  EXPECT_FLOAT_EQ(c.target.masked_select(ptv).min().item<float>(), 70.0f);  // prescription in the target
  EXPECT_LE(c.target.max().item<float>(), 70.0f);
  EXPECT_GT(c.image[0].masked_select(~mask).mean().item<float>(), -1001.0f);  // air around the body
  EXPECT_LT(c.image[0].masked_select(~mask).mean().item<float>(), -999.0f);
}

TEST(Synth, SegmentationCaseHasEveryLabel) {
  const auto c = make_phantom_case(Task::kSegmentation, {32, 32, 32}, 1, 2);
  ASSERT_EQ(c.image.sizes(), (torch::IntArrayRef{1, 32, 32, 32}));
  for (int k = 0; k < 4; ++k) EXPECT_GT((c.target == k).sum().item<int64_t>(), 0) << "label " << k;
  EXPECT_EQ(c.target.max().item<uint8_t>(), 3);
}

TEST(Synth, DatasetHasSplits) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 8, 16);
  DatasetReader r(dir / "p.h5");
  EXPECT_EQ(r.split("train").size(), 6u);
  EXPECT_EQ(r.split("val").size(), 2u);
  EXPECT_EQ(r.info().target_units, "Gy");
}

}  // namespace
}  // namespace u3d
