// A hostile pass over `trainer predict -i` (issue 54): inputs a user's folder really holds, each
// refused with one line naming the file or case, exit 2 for usage and 1 for runtime, and nothing
// written into -o (neither the folder nor its scratch sibling).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>

#include "nifti_support.h"
#include "test_support.h"

namespace u3d {
namespace {

class PredictFilesHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    raw = test::make_nnunet_raw(dir.path(), 4, shape, /*test_cases=*/1);
    auto r = trainer({"import", "nnunet", "--source", raw.string(), "--out", "d.h5", "--val-fraction", "0.25"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    test::write_text(dir / "seg.yaml",
                     "experiment:\n  name: seg\n  output_dir: runs\ndata:\n  path: d.h5\n"
                     "  val_split: \"\"\n  batch_size: 1\n  patch_size: 16\nmodel:\n  levels: 2\n  base_filters: 4\n"
                     "training:\n  epochs: 1\n  steps_per_epoch: 1\n  threads: 1\n  device: cpu\n"
                     "logging:\n  progress_seconds: 0\n");
    r = trainer({"--config", "seg.yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // -i `input` into out/ with the run: exit `code`, one error line holding `needle`, nothing written.
  void refused(const fs::path& input, int code, const std::string& needle, const std::string& run = "runs/seg") {
    const auto r = trainer({"predict", "-i", input.string(), "-o", "out", "--run", run});
    EXPECT_EQ(r.exit_code, code) << input << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << input << "\n" << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << "one error line: " << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << input;
    EXPECT_FALSE(fs::exists(dir / ".out.work")) << input;
  }
  // A case folder `name` holding both channels of the first test case, channel 1 replaced by `ct1`.
  fs::path case_with(const std::string& name, const test::TestNifti& ct1) {
    const fs::path folder = dir / name;
    fs::create_directories(folder);
    fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", folder / "c_0000.nii.gz");
    test::write_test_nifti(folder / "c_0001.nii.gz", ct1);
    return folder;
  }
  const Shape3 shape{20, 24, 28};
  test::TempDir dir;
  fs::path raw;
};

TEST_F(PredictFilesHostile, BrokenHeadersAndNamesAreRefusedInOneLine) {
  const auto [image, labels] = test::nnunet_raw_case(4, shape);
  test::TestNifti good = test::oblique(image[1].contiguous());
  good.qoffset[0] += 4;  // as make_nnunet_raw places case 4
  good.srow[3] += 4;
  // Only one channel where the run takes two; only the second channel.
  fs::create_directories(dir / "one");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", dir / "one" / "c_0000.nii.gz");
  refused(dir / "one", 2, "the model takes 2 input channel(s)");
  fs::create_directories(dir / "second");
  fs::copy_file(raw / "imagesTs" / "case_004_0001.nii.gz", dir / "second" / "c_0001.nii.gz");
  refused(dir / "second", 2, "channel files _0001 (1)");
  // A 4-D NIfTI (several volumes along dim 4).
  test::TestNifti four_d = good;
  four_d.data = torch::zeros({2, shape[0], shape[1], shape[2]});
  four_d.nt = 2;
  refused(case_with("four_d", four_d), 1, "c_0001.nii.gz");
  // Zero and negative voxel sizes.
  test::TestNifti zero = good;
  zero.pixdim = {0, 1, 1};
  zero.sform_code = 0;
  refused(case_with("zero", zero), 1, "c_0001.nii.gz");
  test::TestNifti negative = good;
  negative.pixdim = {1, -2, 1};
  negative.sform_code = 0;
  refused(case_with("negative", negative), 1, "c_0001.nii.gz");
  // An sform that disagrees with the other channel's grid.
  test::TestNifti moved = good;
  moved.srow[7] += 25;
  refused(case_with("moved", moved), 1, "c_0001.nii.gz");
  // A run folder without checkpoints, and none at all.
  fs::create_directories(dir / "empty_run");
  refused(raw / "imagesTs", 2, "empty_run", "empty_run");
}

// The refusals of -o: an existing non-empty folder without --force, and a file.
TEST_F(PredictFilesHostile, AnExistingOutputIsNeverReplacedWithoutForce) {
  fs::create_directories(dir / "out");
  test::write_text(dir / "out" / "keep.txt", "an earlier result");
  auto r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out", "--run", "runs/seg"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("exists and is not empty"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_text(dir / "out" / "keep.txt"), "an earlier result");
  EXPECT_FALSE(fs::exists(dir / ".out.work"));
}

// The rest of issue 54's list, on files nibabel, Pillow and tifffile wrote: a NIfTI whose qform
// disagrees with its sform (both codes 1) is predicted on its sform's grid, as nibabel and the
// importers read it, and its prediction carries both forms unchanged; PNG slices (one channel) and a
// one-channel 3D TIFF for this two-channel run are refused naming the channel count.
TEST_F(PredictFilesHostile, DisagreeingFormsAreKeptAndOtherChannelCountsRefused) {
  const auto python = test::torch_python();
  if (!python) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
  fs::create_directories(dir / "forms");
  std::string cmd = python->string() + " " + (test::source_dir() / "tests/python/write_nifti_forms.py").string();
  for (const char* c : {"_0000", "_0001"}) {
    cmd += fmt::format(" {} {}", (raw / "imagesTs" / fmt::format("case_004{}.nii.gz", c)).string(),
                       (dir / "forms" / fmt::format("p{}.nii.gz", c)).string());
  }
  ASSERT_EQ(std::system((cmd + " 2>&1").c_str()), 0) << cmd;
  auto r = trainer({"predict", "-i", "forms", "-o", "out", "--run", "runs/seg"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::expect_same_label_geometry(dir / "forms/p_0000.nii.gz", dir / "out/p.nii.gz");
  fs::remove_all(dir / "out");
  cmd = python->string() + " " + (test::source_dir() / "tests/python/write_slices.py").string() + " " +
        (dir / "png").string() + " --patients 1 --slices 3 --size 32 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  refused(dir / "png/images", 2, "takes 2 input channels; a 2D image is one (grey)");
  cmd = python->string() + " -c \"import numpy, tifffile; tifffile.imwrite('" + (dir / "v.tif").string() +
        "', numpy.zeros((20, 24, 28), numpy.uint16))\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  refused(dir / "v.tif", 2, "takes 2 input channels; a TIFF volume is one (grey)");
}

// A dose run takes one DICOM export folder: two folders are refused saying so.
TEST(PredictFilesDoseRun, TwoFoldersForADoseRunAreRefusedSayingOneIsTaken) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 6, 16);
  test::write_text(dir / "dose.yaml", test::tiny_config("p.h5", "dose"));
  auto r = test::run_trainer(
      {"--config", "dose.yaml", "--set", "training.epochs=1", "--set", "training.steps_per_epoch=1"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::create_directories(dir / "patient_a");
  fs::create_directories(dir / "patient_b");
  r = test::run_trainer({"predict", "-i", "patient_a", "patient_b", "-o", "out", "--run", "runs/dose"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("takes ONE DICOM export folder"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 inputs were given"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
}  // namespace u3d
