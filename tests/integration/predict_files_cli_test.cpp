// `trainer predict -i IN -o OUT --run RUN` on raw NIfTI files, as nnUNetv2_predict: the inputs are
// written by nifticlib directly (tests/support/nifti_support.h, oblique geometries), the outputs
// compared with `trainer predict -c` (--predict-only) of the same cases imported as a dataset, and
// their headers with the inputs'.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "nifti_support.h"
#include "test_support.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

std::string predict_seg_config(const std::string& name, const std::string& dataset, const std::string& extra = "") {
  std::ostringstream s;
  s << "experiment:\n  name: " << name << "\n  seed: 7\n"
    << "data:\n  path: " << dataset << "\n  batch_size: 2\n  patch_size: 16\n  normalize: [dataset]\n"
    << extra << "model:\n  levels: 2\n  base_filters: 4\n"
    << "training:\n  epochs: 1\n  steps_per_epoch: 2\n  lr: 0.01\n  threads: 1\n  deterministic: true\n"
    << "  device: cpu\n  val_patch_batches: 1\n"
    << "predict:\n  split: test\n"
    << "logging:\n  progress_seconds: 0\n";
  return s.str();
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

class PredictFiles : public ::testing::Test {
 protected:
  void SetUp() override { raw = test::make_nnunet_raw(dir.path(), 4, shape, /*test_cases=*/2); }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // Imports the raw folder (with `import_args`) and trains run `name` on it.
  void train(const std::string& name, const std::vector<std::string>& import_args, const std::string& extra = "",
             const std::vector<std::string>& train_args = {}) {
    std::vector<std::string> args = {"import", "nnunet", "--source", raw.string(), "--out", name + ".h5"};
    args.insert(args.end(), import_args.begin(), import_args.end());
    auto r = trainer(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    test::write_text(dir / (name + ".yaml"), predict_seg_config(name, name + ".h5", extra));
    args = {"train", "-c", name + ".yaml"};
    args.insert(args.end(), train_args.begin(), train_args.end());
    r = trainer(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // Every output of predict -i in `out` equals predict -c's in `reference`, with its input's header.
  void expect_same_predictions(const fs::path& out, const fs::path& reference) {
    ASSERT_EQ(names_in(out), (std::vector<std::string>{"case_004.nii.gz", "case_005.nii.gz"}));
    for (const std::string id : {"case_004", "case_005"}) {
      const auto got = read_nifti(out / (id + ".nii.gz")).data;
      const auto want = read_nifti(reference / (id + ".nii.gz")).data;
      EXPECT_TRUE(torch::equal(got, want)) << id;
      test::expect_same_label_geometry(raw / "imagesTs" / (id + "_0000.nii.gz"), out / (id + ".nii.gz"));
    }
  }
  static void expect_one_error(const test::CommandResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << "one error line: " << r.output;
  }
  const Shape3 shape{20, 24, 28};
  test::TempDir dir;
  fs::path raw;
};

TEST_F(PredictFiles, EqualsPredictOnlyWithEachInputsGeometry) {
  train("seg", {"--val-fraction", "0.25"});
  auto r = trainer({"predict", "-c", "seg.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto reference = dir / "runs" / "seg" / "predictions" / "test";

  r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out", "--run", "runs/seg"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote 2 case(s) into out"), std::string::npos) << r.output;
  expect_same_predictions(dir / "out", reference);
  const auto here = names_in(dir.path());
  EXPECT_TRUE(std::none_of(here.begin(), here.end(), [](const std::string& n) { return n[0] == '.'; }))
      << "no scratch or staged folder left";

  // The same model from the folder trainer export writes (--model), with no run folder at hand.
  r = trainer({"export", "runs/seg", "--format", "safetensors", "--out", "exported"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::rename(dir / "runs", dir / "moved_runs");
  r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out_model", "--model", "exported"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_predictions(dir / "out_model", dir / "moved_runs" / "seg" / "predictions" / "test");
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "o3", "--model", "exported", "--run",
                            "moved_runs/seg"}),
                   2, "--run RUN_DIR (a trained run or experiment) or --model DIR");
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "o3", "--model", "moved_runs"}), 1,
                   "no model.safetensors in it");
  fs::rename(dir / "moved_runs", dir / "runs");

  // Files named one by one, and a non-empty OUT replaced only with --force.
  const std::vector<std::string> files = {
      (raw / "imagesTs" / "case_004_0000.nii.gz").string(), (raw / "imagesTs" / "case_004_0001.nii.gz").string(),
      (raw / "imagesTs" / "case_005_0001.nii.gz").string(), (raw / "imagesTs" / "case_005_0000.nii.gz").string()};
  std::vector<std::string> args = {"predict", "-o", "out", "--run", "runs/seg", "-i"};
  args.insert(args.end(), files.begin(), files.end());
  expect_one_error(trainer(args), 2, "-o out exists and is not empty; --force replaces it");
  args.push_back("--force");
  r = trainer(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_predictions(dir / "out", reference);
}

TEST_F(PredictFiles, RefusesBadInputsWithOneLineAndWritesNothing) {
  train("seg", {"--val-fraction", "0.25"});
  fs::create_directories(dir / "out");
  test::write_text(dir / "out" / "keep.txt", "an earlier result");
  const auto bad = dir / "bad";
  const auto run = [&](const std::string& input, int code, const std::string& needle) {
    expect_one_error(trainer({"predict", "-i", input, "-o", "out", "--run", "runs/seg", "--force"}), code, needle);
    EXPECT_EQ(names_in(dir / "out"), std::vector<std::string>{"keep.txt"}) << input;
  };
  // A channel missing: the model takes CT and T2. Naming refusals are usage errors (exit 2).
  fs::create_directories(bad / "one");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "one" / "case_004_0000.nii.gz");
  run((bad / "one").string(), 2,
      "case 'case_004' (" + (bad / "one").string() +
          "): channel files _0000 (1); the model takes 2 input channel(s): expected "
          "_0000 to _0001");
  // A third channel.
  fs::create_directories(bad / "three");
  for (const std::string k : {"0000", "0001", "0002"}) {
    fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "three" / ("case_004_" + k + ".nii.gz"));
  }
  run((bad / "three").string(), 2, "channel files _0000, _0001, _0002 (3)");
  // Only _0001 files.
  fs::create_directories(bad / "second");
  fs::copy_file(raw / "imagesTs" / "case_004_0001.nii.gz", bad / "second" / "case_004_0001.nii.gz");
  run((bad / "second").string(), 2, "channel files _0001 (1); the model takes 2 input channel(s)");
  // A file without the channel suffix.
  fs::create_directories(bad / "plain");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "plain" / "case_004.nii.gz");
  run((bad / "plain").string(), 2, "case_004.nii.gz: not named as nnU-Net's input files");
  // A folder of NIfTI files that also holds a TIFF volume: refused as the same two files named on
  // the command line are, not the TIFF dropped without a word.
  fs::create_directories(bad / "mixed");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "mixed" / "case_004_0000.nii.gz");
  fs::copy_file(raw / "imagesTs" / "case_004_0001.nii.gz", bad / "mixed" / "case_004_0001.nii.gz");
  test::write_text(bad / "mixed" / "case_004.tif", "not read: the refusal comes first");
  run((bad / "mixed").string(), 2, "holds NIfTI files and TIFF volumes");
  // Channels on other grids: another shape; the same shape in another place (affine).
  fs::create_directories(bad / "shape");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "shape" / "case_004_0000.nii.gz");
  test::write_test_nifti(bad / "shape" / "case_004_0001.nii.gz", test::oblique(torch::zeros({20, 24, 27})));
  run((bad / "shape").string(), 1, (bad / "shape" / "case_004_0001.nii.gz").string() + ": dims");
  fs::create_directories(bad / "moved");
  fs::copy_file(raw / "imagesTs" / "case_004_0000.nii.gz", bad / "moved" / "case_004_0000.nii.gz");
  test::TestNifti moved = test::oblique(torch::zeros({20, 24, 28}));
  moved.qoffset[0] += 10;
  moved.srow[3] += 10;
  test::write_test_nifti(bad / "moved" / "case_004_0001.nii.gz", moved);
  run((bad / "moved").string(), 1, "case_004_0001.nii.gz: orientation or origin (affine) differs");
  // One good case and one bad: nothing of the good one is written either.
  fs::copy_file(raw / "imagesTs" / "case_005_0000.nii.gz", bad / "moved" / "case_005_0000.nii.gz");
  fs::copy_file(raw / "imagesTs" / "case_005_0001.nii.gz", bad / "moved" / "case_005_0001.nii.gz");
  run((bad / "moved").string(), 1, "orientation or origin (affine) differs");
  run((dir / "nope").string(), 2, "-i " + (dir / "nope").string() + ": no such file or folder");

  // OUT over the inputs, --fold on a single run, a run folder that is none.
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", raw.string(), "--run", "runs/seg"}), 2,
                   "holds the input");
  // OUT equal to the input folder, and inside it (a file named on the command line counts by its
  // folder only when the folder itself is given): refused before anything is written, the scratch
  // folder beside OUT included.
  const auto before = names_in(raw / "imagesTs");
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", (raw / "imagesTs").string(), "--run",
                            "runs/seg", "--force"}),
                   2, "holds the input");
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", (raw / "imagesTs" / "preds").string(),
                            "--run", "runs/seg"}),
                   2, "lies inside the input folder");
  expect_one_error(trainer({"predict", "-i", raw.string(), "-o", (raw / "imagesTs" / "deeper" / "preds").string(),
                            "--run", "runs/seg"}),
                   2, "lies inside the input folder");
  EXPECT_EQ(names_in(raw / "imagesTs"), before) << "nothing written inside the input folder";
  expect_one_error(
      trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "o2", "--run", "runs/seg", "--fold", "0"}), 2,
      "is one run (it holds checkpoints/)");
  expect_one_error(trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "o2", "--run", "bad"}), 2,
                   "neither a run folder");
  EXPECT_FALSE(fs::exists(dir / "o2"));
}

// The run's data was resampled at import (--spacing): the inputs are resampled as it was, and the
// predictions come back in each input's own grid, as predict -c writes them.
TEST_F(PredictFiles, ResampledRunPredictsInTheInputGrid) {
  train("lowres", {"--val-fraction", "0.25", "--spacing", "2,1,1"});
  auto r = trainer({"predict", "-c", "lowres.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out", "--run", "runs/lowres"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_predictions(dir / "out", dir / "runs" / "lowres" / "predictions" / "test");
}

// An experiment folder of fold_K runs: all folds averaged by default (nnU-Net's -f 0 1 2 3 4), as
// predict -c --fold all; --fold K one of them.
TEST_F(PredictFiles, ExperimentFolderPredictsWithTheFoldEnsemble) {
  train("cv", {"--val-fraction", "0.25"}, "  folds: 2\n", {"--fold", "all"});
  auto r = trainer({"predict", "-c", "cv.yaml", "--fold", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out", "--run", "runs/cv"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoints (ensemble)"), std::string::npos) << r.output;
  expect_same_predictions(dir / "out", dir / "runs" / "cv" / "ensemble" / "predictions" / "test");
  r = trainer({"predict", "-c", "cv.yaml", "--fold", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "out1", "--run", "runs/cv", "--fold", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_predictions(dir / "out1", dir / "runs" / "cv" / "fold_1" / "predictions" / "test");
  expect_one_error(
      trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "o7", "--run", "runs/cv", "--fold", "7"}), 2,
      "--fold 7: runs/cv has the folds 0, 1 (or all)");
}

}  // namespace
}  // namespace u3d
