// Cross-validation end to end (data/folds.h, predict/ensemble.h, evaluate/cross_validation.h):
// `trainer --fold all` trains every fold in its own run folder and predicts its held-out cases,
// `--resume` continues each fold, `trainer evaluate cv` pools them, and `--predict-only --fold all`
// predicts with the ensemble of the folds.
#include <gtest/gtest.h>

#include <set>

#include "expectations.h"
#include "test_support.h"
#include "u3d/data/folds.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

using test::read_csv;

class CrossValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    test::make_phantom(dir / "p.h5", Task::kSegmentation, 6, 16);
    test::write_text(dir / "cv.yaml", test::tiny_config("p.h5", "cv", Task::kSegmentation));  // folds: --set
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  test::CommandResult train(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--config", "cv.yaml", "--set", "data.folds=2", "--set", "training.epochs=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return trainer(args);
  }
  fs::path exp() const { return dir / "runs" / "cv"; }
  test::TempDir dir;
};

TEST_F(CrossValidation, FoldAllTrainsEachFoldResumesAndSummarises) {
  auto r = train({"--fold", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(exp() / "folds.json"));
  const auto folds = folds_from_json(test::read_text(exp() / "folds.json"), "folds.json");
  ASSERT_EQ(folds.size(), 2u);
  const DatasetReader reader(dir / "p.h5");
  std::set<std::string> pooled;
  for (size_t k = 0; k < 2; ++k) {
    const auto run = exp() / ("fold_" + std::to_string(k));
    EXPECT_TRUE(fs::exists(run / "checkpoints" / "epoch_0001.pt")) << run;
    // The fold's held-out cases, and only those, were predicted after training.
    const auto rows = read_csv(run / "predictions" / "val_metrics.csv");
    std::vector<std::string> predicted;
    for (const auto& row : rows) {
      if (row.at("case") != "mean") predicted.push_back(row.at("case"));
    }
    std::sort(predicted.begin(), predicted.end());
    EXPECT_EQ(predicted, folds[k].val) << "fold " << k;
    pooled.insert(predicted.begin(), predicted.end());
  }
  std::set<std::string> all(reader.split("train").begin(), reader.split("train").end());
  all.insert(reader.split("val").begin(), reader.split("val").end());
  EXPECT_EQ(pooled, all) << "the folds' held-out cases must cover the pool once";

  r = trainer({"evaluate", "cv", "runs/cv"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = read_csv(exp() / "cv_summary.csv");
  ASSERT_EQ(summary.size(), 4u);
  EXPECT_EQ(summary[2].at("fold"), "pooled");
  EXPECT_EQ(summary[2].at("cases"), std::to_string(all.size()));
  EXPECT_TRUE(test::contains(r.output, "pooled")) << r.output;

  // Each fold resumes from its own checkpoint: nothing left to train in either.
  r = train({"--fold", "all", "--resume"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t nothing = 0;
  for (size_t at = r.output.find("nothing to train: all 1 epochs are done"); at != std::string::npos;
       at = r.output.find("nothing to train", at + 1)) {
    ++nothing;
  }
  EXPECT_EQ(nothing, 2u) << r.output;
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(read_csv(exp() / ("fold_" + std::to_string(k)) / "metrics.csv").size(), 1u) << "fold " << k;
  }

  // The ensemble of both folds predicts the file's val split into <name>/ensemble/predictions.
  r = train({"--fold", "all", "--predict-only", "--set", "predict.split=val"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "ensemble of 2 models")) << r.output;
  ASSERT_TRUE(fs::exists(exp() / "ensemble" / "predictions" / "val.h5"));
  const auto manifest = test::read_text(exp() / "ensemble" / "predictions" / "val_outputs.txt");
  EXPECT_TRUE(test::contains(manifest, "fold_0") && test::contains(manifest, "fold_1")) << manifest;
  EXPECT_EQ(read_csv(exp() / "ensemble" / "predictions" / "val_metrics.csv").size(), reader.split("val").size() + 1);
}

// folds.json is the one record of the split: a file whose folds train on their own held-out cases
// is refused, and so is one made again after a fold ran on the deleted one (another seed here).
TEST_F(CrossValidation, FoldsNeverLeakAndAreNeverRemadeUnderTheirRuns) {
  const DatasetReader reader(dir / "p.h5");
  std::vector<std::string> pool = reader.split("train");
  pool.insert(pool.end(), reader.split("val").begin(), reader.split("val").end());
  auto folds = make_folds(pool, 2, /*seed=*/7);
  const std::string leaked = folds[0].val.front();
  folds[0].train.push_back(leaked);
  fs::create_directories(exp());
  test::write_text(exp() / "folds.json", folds_json(folds));
  auto r = train({"--fold", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(test::contains(r.output, "folds.json: fold 0 trains on case '" + leaked + "' that it validates on"))
      << r.output;
  EXPECT_FALSE(fs::exists(exp() / "fold_0"));

  fs::remove(exp() / "folds.json");
  r = train({"--fold", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string saved = test::read_text(exp() / "folds.json");
  fs::remove(exp() / "folds.json");
  r = train({"--fold", "1", "--set", "experiment.seed=99"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "folds.json: missing, but fold_0 of this cross-validation already ran"))
      << r.output;
  EXPECT_FALSE(fs::exists(exp() / "folds.json"));
  EXPECT_FALSE(fs::exists(exp() / "fold_1"));
  r = train({"--fold", "0", "--predict-only"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = train({"--fold", "all", "--predict-only"});  // the ensemble's members come from folds.json too
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "folds.json: missing, but fold_0")) << r.output;
  r = trainer({"evaluate", "cv", "runs/cv"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(test::contains(r.output, "folds.json: not found")) << r.output;
  // Restored, the experiment goes on.
  test::write_text(exp() / "folds.json", saved);
  r = trainer({"evaluate", "cv", "runs/cv"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // An ensemble of more folds than the file holds would pool runs that never existed.
  r = train({"--fold", "all", "--predict-only", "--set", "data.folds=3"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "folds.json: holds 2 folds")) << r.output;
  EXPECT_FALSE(fs::exists(exp() / "ensemble" / "predictions"));
}

TEST_F(CrossValidation, MisuseGetsOneLineAndExitTwo) {
  test::expect_exit(train({}), 2, "data.folds: 2 needs experiment.fold: 0..1 or all");
  test::expect_exit(train({"--ensemble", "fold_0"}), 2, "--ensemble goes with --predict-only");
  test::expect_exit(train({"--fold", "2"}), 2, "experiment.fold: 2 is not a fold of data.folds = 2");
  test::expect_exit(trainer({"--config", "cv.yaml", "--fold", "0"}), 2, "needs data.folds >= 2");
  test::expect_exit(train({"--predict-only", "--ensemble", "nowhere"}), 2, "nowhere: not a run folder");
  test::expect_exit(trainer({"evaluate", "cv", "runs/none"}), 1, "runs/none: not a folder");
}

}  // namespace
}  // namespace u3d
