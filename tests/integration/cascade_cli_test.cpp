// nnU-Net's cascade end to end on the CPU, on the tiny seeded phantoms (tests/python/nnunet_phantoms.py
// --which tiny, one case moved to imagesTs): `trainer plan` with a budget small enough for a 3d_lowres
// writes the first stage's and the second stage's YAMLs; the first stage is re-imported at the
// spacing its header gives and trained with 2-fold cross-validation; `trainer cascade` adds its
// out-of-fold segmentations (the test case: the fold ensemble's) as input channels; the second stage
// trains on the same folds and predicts the test case back to NIfTI.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <regex>

#include "expectations.h"
#include "python_input.h"
#include "test_support.h"
#include "u3d/data/folds.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/predictions_file.h"
#include "u3d/predict/cascade_data.h"

namespace u3d {
namespace {

class CascadeCli : public test::PythonInputTest {
 protected:
  CascadeCli() : PythonInputTest("nnunet_phantoms.py", "raw", "--which tiny --quiet") {}
  void SetUp() override {
    PythonInputTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    const fs::path raw = dir / "raw/Dataset905_Tiny";
    fs::create_directories(raw / "imagesTs");
    fs::rename(raw / "imagesTr/tiny_005_0000.nii.gz", raw / "imagesTs/tiny_005_0000.nii.gz");
    fs::remove(raw / "labelsTr/tiny_005.nii.gz");
    std::string json = test::read_text(raw / "dataset.json");
    json = std::regex_replace(json, std::regex("\"numTraining\": 6"), "\"numTraining\": 5");
    test::write_text(raw / "dataset.json", json);
  }
  test::CommandResult trainer(std::vector<std::string> args, bool small = false) {
    if (small) {
      for (const char* s :
           {"training.epochs=1", "training.steps_per_epoch=2", "training.device=cpu", "training.threads=2",
            "model.base_filters=4", "model.max_filters=16", "logging.progress_seconds=0", "data.folds=2"}) {
        args.insert(args.end(), {"--set", s});
      }
    }
    return test::run_trainer(args, dir.path());
  }
  // Everything up to the first stage's cross-validation and its test predictions.
  void first_stage() {
    auto r =
        trainer({"import", "nnunet", "--source", "raw/Dataset905_Tiny", "--out", "tiny.h5", "--val-fraction", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"plan", "tiny.h5", "--memory-model", "nnunet", "--gpu-memory", "0.02", "--out", "tiny.yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_TRUE(fs::exists(dir / "tiny_lowres.yaml")) << r.output;
    ASSERT_TRUE(fs::exists(dir / "tiny_cascade.yaml")) << r.output;
    const std::string header = test::read_text(dir / "tiny_lowres.yaml");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(header, m, std::regex("--out tiny_lowres.h5 --spacing ([0-9.,]+)"))) << header;
    r = trainer({"import", "nnunet", "--source", "raw/Dataset905_Tiny", "--out", "tiny_lowres.h5", "--val-fraction",
                 "0", "--spacing", m[1].str()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"--config", "tiny_lowres.yaml", "--fold", "all"}, /*small=*/true);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"--config", "tiny_lowres.yaml", "--fold", "all", "--predict-only", "--set", "predict.split=test"},
                /*small=*/true);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void expect_usage_error(const test::CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(test::contains(r.output, needle)) << r.output;
    EXPECT_FALSE(fs::exists(dir / "tiny_cascade.h5"));
  }
};

TEST_F(CascadeCli, SecondStageTrainsOnTheFirstStagesOutOfFoldSegmentations) {
  ASSERT_NO_FATAL_FAILURE(first_stage());
  auto r = trainer({"cascade", "--previous", "runs/tiny_lowres", "--data", "tiny.h5", "--out", "tiny_cascade.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      test::contains(r.output, "6 cases, 5 with the first stage's out-of-fold segmentation and 1 with its predictions"))
      << r.output;

  // Each pooled case carries the segmentation of the fold that held it out; the test case the ensemble's.
  const DatasetReader full(dir / "tiny.h5"), cascade(dir / "tiny_cascade.h5");
  EXPECT_EQ(cascade.info().channel_names, (std::vector<std::string>{"CT", "previous_organ", "previous_tumour"}));
  EXPECT_EQ(cascade.info().splits, full.info().splits);
  ASSERT_EQ(cascade.info().channel_normalization.size(), 3u);
  EXPECT_EQ(cascade.info().channel_normalization[1], "none");
  const auto folds = folds_from_json(test::read_text(dir / "runs/tiny_lowres/folds.json"), "folds.json");
  ASSERT_EQ(folds.size(), 2u);
  auto check = [&](const std::string& id, const fs::path& predictions) {
    SCOPED_TRACE(id);
    const CaseData a = full.read_case(id), b = cascade.read_case(id);
    EXPECT_TRUE(torch::equal(b.image[0], a.image[0]));
    EXPECT_EQ(b.target.defined(), a.target.defined());
    if (a.target.defined()) EXPECT_TRUE(torch::equal(b.target, a.target));
    const PredictionsReader p(dir / predictions);
    const torch::Tensor labels = p.prediction(id, torch::kLong);
    const torch::Tensor scores = torch::one_hot(labels, 3).permute({3, 0, 1, 2}).to(torch::kFloat);
    const Shape3 shape = {a.image.size(1), a.image.size(2), a.image.size(3)};
    EXPECT_LT(labels.numel(), a.image[0].numel());  // the first stage's grid is coarser
    EXPECT_TRUE(torch::equal(b.image.slice(0, 1, 3), previous_stage_channels(scores, shape).to(torch::kFloat)));
  };
  for (size_t k = 0; k < folds.size(); ++k) {
    for (const auto& id : folds[k].val) check(id, fmt::format("runs/tiny_lowres/fold_{}/predictions/val.h5", k));
  }
  check("tiny_005", "runs/tiny_lowres/ensemble/predictions/test.h5");

  r = trainer({"--config", "tiny_cascade.yaml", "--fold", "all"}, /*small=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(dir / "runs/tiny_cascade/folds.json"),
            test::read_text(dir / "runs/tiny_lowres/folds.json"));
  r = trainer({"--config", "tiny_cascade.yaml", "--fold", "all", "--predict-only", "--set", "predict.split=test"},
              /*small=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs/tiny_cascade/ensemble/predictions/test/tiny_005.nii.gz"));
}

TEST_F(CascadeCli, MissingFirstStageOutputsAreNamed) {
  ASSERT_NO_FATAL_FAILURE(first_stage());
  const std::vector<std::string> args = {"cascade", "--previous", "runs/tiny_lowres", "--data",
                                         "tiny.h5", "--out",      "tiny_cascade.h5"};
  fs::rename(dir / "runs/tiny_lowres/ensemble", dir / "ensemble_aside");
  expect_usage_error(trainer(args), "case 'tiny_005' of tiny.h5 has no first-stage prediction");
  expect_usage_error(trainer(args), "predict.split=test");
  fs::rename(dir / "ensemble_aside", dir / "runs/tiny_lowres/ensemble");
  fs::rename(dir / "runs/tiny_lowres/fold_1/predictions/val.h5", dir / "val_aside.h5");
  expect_usage_error(trainer(args), "fold 1 of the first stage has not predicted its held-out cases");
  fs::rename(dir / "val_aside.h5", dir / "runs/tiny_lowres/fold_1/predictions/val.h5");
  fs::rename(dir / "runs/tiny_lowres/folds.json", dir / "folds_aside.json");
  expect_usage_error(trainer(args), "has no folds.json: train the first stage with cross-validation");
  fs::rename(dir / "folds_aside.json", dir / "runs/tiny_lowres/folds.json");
  EXPECT_EQ(trainer(args).exit_code, 0);
}

}  // namespace
}  // namespace u3d
