// `trainer evaluate surface` end to end on NIfTI and TIFF label folders (evaluate/surface_eval.h):
// scores per case and mean in a CSV, the ignore label honoured, labels checked as stored, every
// reference case scored, bad files named in one line; TIFF-imported data predicted back as TIFF.
#include <gtest/gtest.h>

#include "expectations.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

using test::contains;

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
  // --out never names a label file it reads, --force or not (it would be replaced by the CSV).
  const auto ref_bytes = test::read_text(dir / "ref" / "a.nii.gz");
  r = trainer(
      {"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--out", "ref/a.nii.gz", "--force"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "is the input")) << r.output;
  EXPECT_EQ(test::read_text(dir / "ref" / "a.nii.gz"), ref_bytes);
  write("pred", "b", sheet(0, false) * 3);
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--force"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "pred/b.nii.gz")) << r.output;
  write("pred", "c", sheet(0, false));
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--force"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "no reference for case 'c'")) << r.output;
}

// Labels are checked in the file's own type: 256 is not background, -1 not 255, a reference 258 not
// the ignore label 2 (each was cast to uint8 first).
TEST_F(SurfaceCli, LabelsOutsideTheByteRangeAreRefusedAsWhatTheyAre) {
  const auto plain = sheet(0, false).to(torch::kInt16);
  write("ref", "a", plain);
  write("pred", "a", plain * 256);  // 256 on the sheet
  auto r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "pred/a.nii.gz (reference ref/a.nii.gz): score_surface: prediction holds the value "
                       "256, expected 0 or 1"))
      << r.output;
  auto minus = plain.clone();
  minus[0][0][0] = -1;
  write("pred", "a", minus);
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "pred/a.nii.gz: holds the negative label value -1; labels are 0 (background)"))
      << r.output;
  auto forged = plain.clone();
  forged[0][0][0] = 258;
  write("ref", "a", forged);
  write("pred", "a", plain);
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "reference holds the value 258, expected 0, 1 or the ignore label 2")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "pred" / "surface_evaluation.csv"));
}

// A reference case without a prediction is not dropped from the means: refused, naming it, unless
// --only-predicted (which says which were left out); two files of one case are refused.
TEST_F(SurfaceCli, EveryReferenceCaseIsScoredUnlessOnlyPredictedIsAsked) {
  write("ref", "a", sheet(0, false));
  write("ref", "b", sheet(0, false));
  write("pred", "a", sheet(0, false));
  auto r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "pred: no prediction for 1 of the 2 reference cases in ref: b;")) << r.output;
  EXPECT_TRUE(contains(r.output, "--only-predicted")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "pred" / "surface_evaluation.csv"));
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--only-predicted"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "1 of the 2 reference cases in ref have no prediction and are not scored"))
      << r.output;
  EXPECT_EQ(test::read_csv(dir / "pred" / "surface_evaluation.csv").size(), 2u);
  write_tiff_volume(dir / "pred" / "a.tif", sheet(0, false));
  r = trainer({"evaluate", "surface", "--reference", "ref", "--predictions", "pred", "--only-predicted", "--force"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "pred: a.nii.gz and a.tif are two label files of case 'a'; keep one")) << r.output;
}

// TIFF data end to end: `import tiff`, training, `--predict-only` writes predictions/val/<id>.tif
// (and `predict -i` on the raw TIFF files the same), and `evaluate surface` scores them against the
// TIFF labels.
TEST_F(SurfaceCli, TiffImportedDataIsPredictedAndScoredAsTiff) {
  fs::create_directories(dir / "img");
  fs::create_directories(dir / "lab");
  for (const std::string id : {"a", "b", "c", "d"}) {
    torch::Tensor l = sheet(id == "a" ? 0 : 1, /*ignored=*/true);
    write_tiff_volume(dir / "lab" / (id + ".tif"), l);
    write_tiff_volume(dir / "img" / (id + ".tif"), l.eq(1).to(torch::kFloat) + 0.1 * torch::rand({24, 24, 24}));
  }
  auto r = trainer({"import", "tiff", "--images", "img", "--labels", "lab", "--ignore-label", "2", "--out", "s.h5",
                    "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string yaml = test::tiny_config("s.h5", "t", Task::kSegmentation);
  yaml.replace(yaml.find("epochs: 2"), 9, "epochs: 1\n  steps_per_epoch: 2");
  test::write_text(dir / "t.yaml", yaml + "predict:\n  split: val\n");
  r = trainer({"--config", "t.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"--config", "t.yaml", "--predict-only"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const DatasetReader data(dir / "s.h5");
  const auto pred = dir / "runs" / "t" / "predictions" / "val";
  for (const auto& id : data.split("val")) {
    ASSERT_TRUE(fs::exists(pred / (id + ".tif"))) << r.output;
    const torch::Tensor labels = read_tiff_volume(pred / (id + ".tif"));
    EXPECT_EQ(labels.sizes(), (std::vector<int64_t>{24, 24, 24}));
    EXPECT_EQ(labels.scalar_type(), torch::kUInt8);
    EXPECT_LE(labels.max().item<int>(), 1);
  }
  // The same volumes as raw TIFF files through `trainer predict -i` (a 3D model: volumes, not
  // slices): the same labels as --predict-only.
  std::vector<std::string> args = {"predict", "-o", "raw", "--run", "runs/t"};
  for (const auto& id : data.split("val")) args.insert(args.end(), {"-i", "img/" + id + ".tif"});
  const auto raw = trainer(args);
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_NE(raw.output.find("TIFF volume(s)"), std::string::npos) << raw.output;
  for (const auto& id : data.split("val")) {
    ASSERT_TRUE(fs::exists(dir / "raw" / (id + ".tif"))) << raw.output;
    EXPECT_TRUE(torch::equal(read_tiff_volume(dir / "raw" / (id + ".tif")), read_tiff_volume(pred / (id + ".tif"))))
        << id << ": predict -i and --predict-only disagree";
  }
  r = trainer({"evaluate", "surface", "--reference", "lab", "--predictions", pred.string(), "--only-predicted"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = test::read_csv(pred / "surface_evaluation.csv");
  ASSERT_EQ(rows.size(), data.split("val").size() + 1);
  EXPECT_EQ(rows[0].at("case"), data.split("val").at(0));
}

}  // namespace
}  // namespace u3d
