#include <gtest/gtest.h>

#include <set>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/io/synth.h"

namespace u3d {
namespace {

CaseData surface_case(int64_t size, uint64_t seed, int64_t index) {
  return make_phantom_case(Task::kSegmentation, {size, size, size}, seed, index, PhantomKind::kSurface);
}

// Share of the surface voxels (label 1) that have a voxel of another label within `r` voxels along
// some axis (outside the volume counts as another label).
double share_near_other_label(const torch::Tensor& labels, int64_t r) {
  const auto surface = labels.eq(1);
  const auto padded = torch::constant_pad_nd(surface.to(torch::kUInt8), {r, r, r, r, r, r}, 0).to(torch::kBool);
  auto near = torch::zeros_like(surface);
  for (int64_t axis = 0; axis < 3; ++axis) {
    for (int64_t k = -r; k <= r; ++k) {
      std::array<int64_t, 3> start{r, r, r};
      start[static_cast<size_t>(axis)] += k;
      near |= ~padded.narrow(0, start[0], labels.size(0))
                   .narrow(1, start[1], labels.size(1))
                   .narrow(2, start[2], labels.size(2));
    }
  }
  return (near & surface).sum().item<double>() / surface.sum().item<double>();
}

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

TEST(Synth, KitsCasesAreCtAt1p6MmWithKidneyAndTumourInVariedSizes) {
  std::set<std::vector<int64_t>> shapes;
  for (int64_t i = 0; i < 4; ++i) {
    const auto c = make_phantom_case(Task::kSegmentation, {32, 32, 32}, 0, i, PhantomKind::kKits);
    const auto t = c.target.sizes();
    EXPECT_GE(t[0], 32);
    EXPECT_LE(t[0], 64);
    EXPECT_GE(t[1], 32);
    EXPECT_LE(t[2], 44);
    EXPECT_EQ(c.image.sizes().slice(1), t);
    shapes.insert(t.vec());
    EXPECT_EQ(c.spacing, (std::array<double, 3>{1.6, 1.6, 1.6}));
    EXPECT_LT(c.image.min().item<float>(), -800.0f);  // air in HU
    EXPECT_GT((c.target == 1).sum().item<int64_t>(), 0) << "kidney";
    EXPECT_GT((c.target == 2).sum().item<int64_t>(), 0) << "tumour";
    EXPECT_EQ(c.target.max().item<int>(), 2);
  }
  EXPECT_GT(shapes.size(), 1u) << "the volumes vary in size";
  const auto info = phantom_info(Task::kSegmentation, PhantomKind::kKits);
  EXPECT_EQ(info.num_classes, 3);
  EXPECT_THROW(phantom_info(Task::kDose, PhantomKind::kKits), UsageError);
}

TEST(Synth, DatasetHasSplits) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 8, 16);
  DatasetReader r(dir / "p.h5");
  EXPECT_EQ(r.split("train").size(), 6u);
  EXPECT_EQ(r.split("val").size(), 2u);
  EXPECT_EQ(r.info().target_units, "Gy");
}

TEST(Synth, SurfaceCaseIsDeterministic) {
  const auto a = surface_case(24, 3, 5);
  const auto b = surface_case(24, 3, 5);
  const auto c = surface_case(24, 3, 6);
  EXPECT_TRUE(torch::equal(a.image, b.image));
  EXPECT_TRUE(torch::equal(a.target, b.target));
  EXPECT_FALSE(torch::equal(a.target, c.target));
  EXPECT_FALSE(torch::equal(a.target, make_phantom_case(Task::kSegmentation, {24, 24, 24}, 3, 5).target));
  EXPECT_EQ(a.id, "case_005");
}

TEST(Synth, SurfaceCaseHasThinSheetsAndUnlabeledSlabs) {
  double share_sum = 0;
  const int64_t n = 6;
  for (int64_t i = 0; i < n; ++i) {
    const auto c = surface_case(64, 0, i);
    ASSERT_EQ(c.image.sizes(), (torch::IntArrayRef{1, 64, 64, 64}));
    ASSERT_EQ(c.target.scalar_type(), torch::kUInt8);
    EXPECT_EQ(c.target.max().item<uint8_t>(), 2) << "case " << i;
    const double background = c.target.eq(0).sum().item<double>();
    const double surface = c.target.eq(1).sum().item<double>();
    const double ignored = c.target.eq(2).sum().item<double>();
    EXPECT_GT(surface, 0) << "case " << i;
    EXPECT_GT(ignored, 0.01 * static_cast<double>(c.target.numel())) << "case " << i;
    EXPECT_EQ(background + surface + ignored, static_cast<double>(c.target.numel())) << "case " << i;
    const double share = surface / (background + surface);  // of the labelled voxels
    EXPECT_LT(share, 0.25) << "case " << i;
    share_sum += share;
    // Thin: nearly every surface voxel has another label within 2 voxels along some axis (where
    // sheets touch, the two together are thicker).
    EXPECT_GT(share_near_other_label(c.target, 2), 0.95) << "case " << i;
    // Brighter sheets: the image tells them apart.
    const auto image = c.image[0];
    EXPECT_GT(image.masked_select(c.target.eq(1)).mean().item<double>(),
              image.masked_select(c.target.eq(0)).mean().item<double>() + 0.4)
        << "case " << i;
  }
  EXPECT_LT(share_sum / static_cast<double>(n), 0.12);
}

TEST(Synth, SurfaceDatasetRecordsTheIgnoreLabel) {
  test::TempDir dir;
  PhantomOptions o = test::surface_phantom(3, 24);
  o.seed = 7;
  write_phantom_dataset(o, dir / "s.h5");
  DatasetReader r(dir / "s.h5");
  EXPECT_EQ(r.info().task, Task::kSegmentation);
  EXPECT_EQ(r.info().num_classes, 2);
  EXPECT_EQ(r.info().ignore_label, 2);
  EXPECT_EQ(r.info().class_names, (std::vector<std::string>{"background", "surface"}));
  const CaseData c = r.read_case("case_001");
  EXPECT_TRUE(torch::equal(c.target, surface_case(24, 7, 1).target));
  EXPECT_EQ(c.target.max().item<uint8_t>(), 2);
  o.task = Task::kDose;
  EXPECT_THROW(write_phantom_dataset(o, dir / "d.h5"), UsageError);
}

TEST(Synth, SurfaceNnunetFolderNamesTheIgnoreLabel) {
  test::TempDir dir;
  PhantomOptions o = test::surface_phantom(2, 16);
  write_phantom_nnunet_raw(o, dir / "Dataset901_Surface");
  const std::string json = read_file(dir / "Dataset901_Surface" / "dataset.json");
  EXPECT_NE(json.find(R"("labels": {"background": 0, "surface": 1, "ignore": 2})"), std::string::npos) << json;
  EXPECT_TRUE(std::filesystem::exists(dir / "Dataset901_Surface" / "labelsTr" / "case_001.nii.gz"));
}

}  // namespace
}  // namespace u3d
