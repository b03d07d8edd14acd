// From a folder of PNG slices to Dice (docs/slices.md): Pillow writes 12 patients of 2D phantoms
// (tests/python/write_slices.py), `trainer import images` stacks them into cases, a 2D U-Net
// (model.preset unet2d made small: model.dims 2, Conv2d on [1, 64, 64] slices) trains on the CPU,
// `--predict-only` writes one PNG mask per slice of the held-out test patients, and
// `trainer evaluate segmentation` scores them per case: mean Dice of the tumour above 0.8. The same
// PNG files through `trainer predict -i` give the same masks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/images/image2d.h"

namespace u3d {
namespace {

TEST(SlicesTraining, PngPatientsTrainA2dNetAboveEightyPercentDiceOnTestPatients) {
  const auto python = test::torch_python();
  if (!python) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
  test::TempDir dir;
  const std::string cmd = python->string() + " " + (test::source_dir() / "tests/python/write_slices.py").string() +
                          " " + (dir / "lgg").string() + " --patients 12 --slices 8 --size 64";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto r = test::run_trainer({"import", "images", "--images", "lgg/images", "--out", "lgg.h5", "--test-fraction",
                              "0.25", "--val-fraction", "0.17", "--reference-out", "reference"},
                             dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("96 slices in 12 cases, 7 train / 2 val / 3 test"), std::string::npos) << r.output;
  test::write_text(dir / "slices.yaml",
                   "experiment:\n  name: slices\n  seed: 7\n"
                   "data:\n  path: lgg.h5\n  batch_size: 8\n  patch_size: [1, 64, 64]\n  normalize: [zscore]\n"
                   "  foreground_fraction: 0.33\n"
                   "model:\n  preset: unet2d\n  levels: 4\n  base_filters: 8\n"
                   "training:\n  epochs: 10\n  steps_per_epoch: 20\n  optimizer: adamw\n  lr: 0.003\n"
                   "  weight_decay: 0.0001\n  threads: 2\n  device: cpu\n  val_every: 10\n"
                   "checkpoint:\n  every_epochs: 10\n"
                   "logging:\n  progress_seconds: 0\n"
                   "predict:\n  split: test\n");
  r = test::run_trainer({"--config", "slices.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_trainer({"--config", "slices.yaml", "--predict-only"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path predicted = dir / "runs" / "slices" / "predictions" / "test";
  DatasetReader data(dir / "lgg.h5");
  ASSERT_EQ(data.split("test").size(), 3u);
  for (const auto& id : data.split("test")) {
    EXPECT_TRUE(fs::exists(predicted / (id + ".tif"))) << id;  // the volume, as for TIFF imports
    for (int k = 1; k <= 8; ++k) {
      const fs::path png = predicted / id / (id + "_" + std::to_string(k) + "_mask.png");
      ASSERT_TRUE(fs::exists(png)) << png;
      const Image2d m = read_image2d(png);
      EXPECT_EQ(m.pixels.sizes(), (std::vector<int64_t>{64, 64})) << png;
      EXPECT_TRUE(((m.pixels == 0) | (m.pixels == 255)).all().item<bool>()) << png << ": a binary mask is 0/255";
    }
  }
  // The same test patients as raw PNG files through `trainer predict -i` (no import, no config): a
  // folder of their images with their masks beside them (left out), the same masks as --predict-only.
  fs::create_directories(dir / "unseen");
  for (const auto& id : data.split("test")) {
    for (int k = 1; k <= 8; ++k) {
      for (const std::string tail : {"", "_mask"}) {
        const std::string name = id + "_" + std::to_string(k) + tail + ".png";
        fs::copy_file(dir / "lgg" / "images" / name, dir / "unseen" / name);
      }
    }
  }
  r = test::run_trainer({"predict", "-i", "unseen", "-o", "from_files", "--run", "runs/slices"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("predict: 24 2D image(s)"), std::string::npos) << r.output;
  for (const auto& id : data.split("test")) {
    EXPECT_TRUE(fs::exists(dir / "from_files" / (id + ".tif"))) << id;
    for (int k = 1; k <= 8; ++k) {
      const std::string name = id + "_" + std::to_string(k) + "_mask.png";
      ASSERT_TRUE(fs::exists(dir / "from_files" / id / name)) << name << "\n" << r.output;
      EXPECT_TRUE(
          torch::equal(read_image2d(dir / "from_files" / id / name).pixels, read_image2d(predicted / id / name).pixels))
          << name << ": predict -i and --predict-only disagree";
    }
  }
  // 2D images and another kind of input in one call: one line, exit 2, nothing written.
  test::write_text(dir / "x.nii.gz", "not read");
  r = test::run_trainer({"predict", "-i", "unseen", "x.nii.gz", "-o", "mixed", "--run", "runs/slices"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("-i mixes 2D images"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "mixed"));
  r = test::run_trainer({"evaluate", "segmentation", "--reference", "reference", "--predictions", predicted.string(),
                         "--only-predicted", "--out", "scores.csv"},
                        dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = test::read_csv(dir / "scores.csv");
  double dice = -1;
  for (const auto& row : rows) {
    if (row.at("case") == "mean" && row.at("label") == "1") dice = std::stod(row.at("dice"));
  }
  RecordProperty("test_mean_dice", std::to_string(dice));
  EXPECT_GE(dice, 0.8) << r.output;
}

}  // namespace
}  // namespace u3d
