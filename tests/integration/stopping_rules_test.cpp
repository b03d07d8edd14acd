// Stopping rules (train/trainer.h): training.early_stop_patience and training.max_minutes end a
// run after an epoch, with its checkpoint and a line saying why; --resume continues from there and
// applies the same rules (nothing to do is exit 0, not a new epoch).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "expectations.h"
#include "test_support.h"

namespace u3d {
namespace {

using test::read_csv;

using test::contains;

class StoppingRules : public ::testing::Test {
 protected:
  void SetUp() override { test::make_phantom(dir / "p.h5", Task::kDose, 8, 16); }
  // Runs the trainer on the tiny config `name` with `env` (U3D_TEST_FAULTS), to its end.
  test::CommandResult train(const std::string& name, std::vector<std::string> extra, const std::string& faults = "") {
    if (!fs::exists(dir / (name + ".yaml"))) test::write_text(dir / (name + ".yaml"), test::tiny_config("p.h5", name));
    std::vector<std::string> args = {"--config", name + ".yaml"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::ProcessOptions options;
    if (!faults.empty()) options.env["U3D_TEST_FAULTS"] = faults;
    test::TrainerProcess p(args, dir.path(), options);
    const int code = p.wait();
    return {code, p.output()};
  }
  // train() with --resume and `more` after `sets`.
  test::CommandResult resumed(const std::string& name, std::vector<std::string> sets, const std::string& faults,
                              const std::vector<std::string>& more = {}) {
    sets.push_back("--resume");
    sets.insert(sets.end(), more.begin(), more.end());
    return train(name, sets, faults);
  }
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
  test::TempDir dir;
};

TEST_F(StoppingRules, EarlyStopAfterPatienceEpochsWithACheckpointAndResumeHasNothingToDo) {
  // Validation is NaN from epoch 2 on: epoch 1 stays the best; patience 2 stops after epoch 3.
  // checkpoint.every_epochs 5: epoch 3's checkpoint is written because the run ends there.
  const std::vector<std::string> sets = {"--set", "training.epochs=8",        "--set", "training.early_stop_patience=2",
                                         "--set", "checkpoint.every_epochs=5"};
  auto r = train("es", sets, "nan_val@2-8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "stopping after epoch 3 of 8: early stop: val_mae has not improved for 2 epochs"))
      << r.output;
  EXPECT_EQ(read_csv(run("es") / "metrics.csv").size(), 3u);
  EXPECT_TRUE(fs::exists(run("es") / "checkpoints" / "epoch_0003.pt"));
  EXPECT_FALSE(fs::exists(run("es") / "checkpoints" / "epoch_0004.pt"));
  // The count survives the resume: it starts from the best epoch in the checkpoint.
  std::vector<std::string> resume = sets;
  resume.push_back("--resume");
  r = train("es", resume, "nan_val@2-8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "nothing to train: early stop")) << r.output;
  EXPECT_EQ(read_csv(run("es") / "metrics.csv").size(), 3u);
  // More patience (a runtime key: no --allow-config-change) trains on until the new limit.
  resume.insert(resume.end(), {"--set", "training.early_stop_patience=4"});
  r = train("es", resume, "nan_val@2-8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "stopping after epoch 5 of 8")) << r.output;
  EXPECT_EQ(read_csv(run("es") / "metrics.csv").size(), 5u);
}

// Issue 35, defect 6: with training.val_every above the patience, epochs without a validation are
// no evidence against the monitored value: the count runs over validated epochs only (before, the
// run stopped after epoch 2, before its first validation).
TEST_F(StoppingRules, EarlyStopCountsOnlyEpochsThatValidate) {
  // Validations after epochs 3, 6, 9, 12; epoch 3's is the best (NaN from epoch 4 on), so the
  // patience of 2 runs out at the validation of epoch 9.
  const std::vector<std::string> sets = {
      "--set", "training.epochs=12", "--set", "training.val_every=3", "--set", "training.early_stop_patience=2"};
  auto r = train("ve", sets, "nan_val@4-12");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "stopping after epoch 9 of 12: early stop: val_mae has not improved for 6 epochs (2 "
                       "validated; training.early_stop_patience 2; best"))
      << r.output;
  const auto rows = read_csv(run("ve") / "metrics.csv");
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_FALSE(rows[2].at("val_mae").empty());
  EXPECT_TRUE(fs::exists(run("ve") / "checkpoints" / "best.pt"));
  // The resume counts the same way: nothing left to train; a patience of 3 trains to the last epoch.
  r = resumed("ve", sets, "nan_val@4-12");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "nothing to train: early stop")) << r.output;
  r = resumed("ve", sets, "nan_val@4-12", {"--set", "training.early_stop_patience=3"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_csv(run("ve") / "metrics.csv").size(), 12u) << r.output;
}

TEST_F(StoppingRules, TimeBudgetStopsBeforeAnEpochWouldOverrunAndTheClockSurvivesResume) {
  // slow_val: 400 ms per validation case (2 val cases): every epoch takes about a second, so a
  // 1.5-second budget (start-up included) ends the run after its first or second epoch.
  const std::vector<std::string> sets = {"--set", "training.epochs=6", "--set", "training.max_minutes=0.025"};
  auto r = train("tb", sets, "slow_val@400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(contains(r.output, "time budget:")) << r.output;
  // The way on: the run's own command with twice the budget in place of its --set.
  EXPECT_TRUE(contains(r.output, " --config tb.yaml --set training.epochs=6 --set training.max_minutes=0.05 --resume"))
      << r.output;
  const size_t done = read_csv(run("tb") / "metrics.csv").size();
  ASSERT_GE(done, 1u);
  ASSERT_LT(done, 6u);
  EXPECT_TRUE(fs::exists(run("tb") / "checkpoints" / fmt::format("epoch_{:04d}.pt", done)));
  // The clock survives the resume: with the same budget and the same slow epochs, the resumed run
  // trains at most one more epoch (none when the budget is already spent) and stops again.
  std::vector<std::string> resume = sets;
  resume.push_back("--resume");
  r = train("tb", resume, "slow_val@400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "time budget:")) << r.output;
  const size_t after = read_csv(run("tb") / "metrics.csv").size();
  EXPECT_GE(after, done);
  EXPECT_LE(after, done + 1);
  // A budget below the time already spent: nothing to train (a runtime key: no --allow-config-change).
  std::vector<std::string> spent = resume;
  spent.insert(spent.end(), {"--set", "training.max_minutes=0.001"});
  r = train("tb", spent);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "nothing to train: time budget")) << r.output;
  EXPECT_EQ(read_csv(run("tb") / "metrics.csv").size(), after);
  // A larger budget (0: none) finishes the run.
  resume.insert(resume.end(), {"--set", "training.max_minutes=0"});
  r = train("tb", resume);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_csv(run("tb") / "metrics.csv").size(), 6u);
}

TEST_F(StoppingRules, EarlyStopWithoutAValidationSplitIsAConfigError) {
  const auto r = train("nv", {"--set", "training.early_stop_patience=3", "--set", "data.val_split=\"\""});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "training.early_stop_patience needs a validation split")) << r.output;
  // A monitored value that no validation of the run measures (issue 35): never a best, never an
  // early stop; refused.
  test::make_phantom(dir / "s.h5", Task::kSegmentation, 6, 16);
  test::write_text(dir / "nf.yaml", test::tiny_config("s.h5", "nf", Task::kSegmentation));
  const auto none = train("nf", {"--set", "training.early_stop_patience=3", "--set", "training.val_full=false", "--set",
                                 "training.val_patch_batches=1", "--set", "checkpoint.monitor=val_metric"});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_TRUE(contains(none.output,
                       "checkpoint.monitor: val_metric is measured on the whole val volumes, which "
                       "training.val_full: false turns off"))
      << none.output;
}

}  // namespace
}  // namespace u3d
