// `trainer evaluate surface` end to end on NIfTI label folders (evaluate/surface_eval.h): scores per
// case and mean in a CSV, the ignore label honoured, bad files named in one line.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/io/nifti.h"

namespace u3d {
namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A 24^3 volume with a curved sheet 2 voxels thick (labels 1) and, with `ignored`, labels 2 where H >= 18.
torch::Tensor sheet(int64_t shift, bool ignored) {
  auto v = torch::zeros({24, 24, 24}, torch::kUInt8);
  auto a = v.accessor<uint8_t, 3>();
  for (int64_t h = 2; h < 22; ++h) {
    for (int64_t w = 2; w < 22; ++w) {
      const int64_t d = 8 + shift + (w - 12) * (w - 12) / 20;
      a[d][h][w] = a[d + 1][h][w] = 1;
    }
  }
  if (ignored) v.slice(1, 18, 24).masked_fill_(v.slice(1, 18, 24).eq(0), 2);
  return v;
}

class SurfaceCli : public ::testing::Test {
 protected:
  void write(const std::string& folder, const std::string& id, const torch::Tensor& v) {
    fs::create_directories(dir / folder);
    write_nifti(dir / folder / (id + ".nii.gz"), v, plain_geometry({24, 24, 24}, {1.0, 1.0, 1.0}));
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  test::TempDir dir;
};

TEST_F(SurfaceCli, ScoresPerCaseHonourTheIgnoreLabelAndNameBadFiles) {
  write("ref", "a", sheet(0, /*ignored=*/true));
  write("ref", "b", sheet(0, /*ignored=*/true));
  write("pred", "a", sheet(0, false).masked_fill(sheet(0, true).eq(2), 0));  // exact where it counts
  auto noisy = sheet(1, false);                                              // one voxel off everywhere
  noisy.slice(1, 20, 24).fill_(1);                                           // and junk in the ignored part
  write("pred", "b", noisy);
  auto r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = test::read_csv(dir / "pred" / "surface_evaluation.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].at("case"), "a");
  EXPECT_DOUBLE_EQ(std::stod(rows[0].at("total")), 1.0);
  EXPECT_EQ(rows[0].at("b0_pred"), "1");
  EXPECT_DOUBLE_EQ(std::stod(rows[1].at("surface_dice")), 1.0) << "one voxel off is within 2 voxels";
  EXPECT_LT(std::stod(rows[1].at("total")), 1.0);
  EXPECT_EQ(rows[2].at("case"), "mean");
  // Without the ignore label the junk counts (and the reference's 2s are an error).
  r = trainer(
      {"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--ignore-label", "-1", "--out", "x.csv"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "(reference ref/")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "x.csv"));
  // An existing CSV is kept without --force; a prediction value outside 0/1 names its file.
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  write("pred", "b", sheet(0, false) * 3);
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--force"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "pred/b.nii.gz")) << r.output;
  write("pred", "c", sheet(0, false));
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--force"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no reference for case 'c'")) << r.output;
}

}  // namespace
}  // namespace u3d
