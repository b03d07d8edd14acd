// The OpenKBP workflow through the trainer binary on the real sample: import, evaluate (golden
// values through the submission format), train the challenge's baseline network briefly,
// predict into the submission format, and evaluate those predictions (CSV folder and HDF5 alike).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d {
namespace {

using test::run_trainer;

// "dose score X Gy" and "DVH score Y Gy" from the evaluate command's output.
std::pair<double, double> printed_scores(const std::string& output) {
  double dose = -1, dvh = -1;
  const auto d = output.find("dose score ");
  const auto v = output.find("DVH score ");
  if (d != std::string::npos) dose = std::stod(output.substr(d + 11));
  if (v != std::string::npos) dvh = std::stod(output.substr(v + 10));
  return {dose, dvh};
}

class OpenKbpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = test::unpack_openkbp_sample(dir.path());
    if (!source_) GTEST_SKIP() << "OpenKBP sample not found (../shared/data)";
  }
  test::TempDir dir;
  std::optional<fs::path> source_;
};

TEST_F(OpenKbpCli, ImportRefusesToOverwriteAndNamesBadSources) {
  auto r = run_trainer({"import", "openkbp", "--source", "provided-data", "--out", "kbp.h5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("16 patients: train 12, val 4"), std::string::npos) << r.output;
  EXPECT_EQ(DatasetReader(dir / "kbp.h5").split("train").size(), 12u);
  r = run_trainer({"import", "openkbp", "--source", "provided-data", "--out", "kbp.h5"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("kbp.h5 exists; pass --force"), std::string::npos) << r.output;
  // One folder of pt_* folders, with --force.
  r = run_trainer({"import", "openkbp", "--source", "provided-data/validation-pats", "--out", "kbp.h5", "--force"},
                  dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(DatasetReader(dir / "kbp.h5").split("val").size(), 4u);
  r = run_trainer({"import", "openkbp", "--source", "nowhere", "--out", "x.h5"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nowhere is not a folder"), std::string::npos) << r.output;
  r = run_trainer({"import"}, dir.path());  // a kind is required
  EXPECT_NE(r.exit_code, 0);
  // A corrupt file: exit 1, file and line in the message, no output.
  test::write_text(*source_ / "train-pats" / "pt_1" / "PTV70.csv", ",data\n12,\n99999999,\n");
  r = run_trainer({"import", "openkbp", "--source", "provided-data", "--out", "bad.h5"}, dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("PTV70.csv:3: index 99999999 is outside the grid"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad.h5"));
}

TEST_F(OpenKbpCli, EvaluateReadsSubmissionFilesAndReproducesTheGoldenScores) {
  fs::create_directories(dir / "scale95");
  for (const auto& id : {"pt_201", "pt_202", "pt_203", "pt_204"}) {
    const auto dose = openkbp::read_dose_csv(*source_ / "validation-pats" / id / "dose.csv");
    openkbp::write_dose_csv(dir / "scale95" / (std::string(id) + ".csv"), 0.95 * dose);
  }
  const auto r = run_trainer({"evaluate", "openkbp", "--reference", "provided-data/validation-pats", "--predictions",
                              "scale95", "--out", "scores.csv"},
                             dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto [dose, dvh] = printed_scores(r.output);
  const auto golden = test::read_csv(*test::shared_data_dir() / "openkbp-sample-metrics-summary.csv");
  EXPECT_NEAR(dose, std::stod(golden.at(0).at("dose_score")), 1e-4) << r.output;
  EXPECT_NEAR(dvh, std::stod(golden.at(0).at("dvh_score")), 1e-4) << r.output;
  const auto rows = test::read_csv(dir / "scores.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("patient"), "pt_201");
  EXPECT_EQ(rows[0].at("n_dvh_metrics"), "23");
  EXPECT_EQ(test::read_csv(dir / "scores_dvh.csv").size(), 23u + 19u + 16u + 19u);
  // Results are never overwritten silently; a missing prediction is named.
  auto again = run_trainer({"evaluate", "openkbp", "--reference", "provided-data/validation-pats", "--predictions",
                            "scale95", "--out", "scores.csv"},
                           dir.path());
  EXPECT_EQ(again.exit_code, 2) << again.output;
  fs::remove(dir / "scale95" / "pt_203.csv");
  again = run_trainer({"evaluate", "openkbp", "--reference", "provided-data/validation-pats", "--predictions",
                       "scale95", "--out", "other.csv"},
                      dir.path());
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("no prediction for 1 of the 4 reference patients: pt_203"), std::string::npos)
      << again.output;
}

// configs/openkbp_baseline.yaml with a 2-filter network for one step: validation scores land in
// metrics.csv, --predict-only writes the submission files, and evaluating them (or the HDF5) gives
// the validation's dose score.
TEST_F(OpenKbpCli, BaselineTrainsPredictsSubmissionFilesAndEvaluates) {
  ASSERT_EQ(
      run_trainer({"import", "openkbp", "--source", "provided-data", "--out", "data/openkbp.h5"}, dir.path()).exit_code,
      0);
  const std::string config = (test::source_dir() / "configs" / "openkbp_baseline.yaml").string();
  const std::vector<std::string> overrides = {
      "--set", "model.base_filters=2",       "--set", "training.epochs=1",   "--set", "training.steps_per_epoch=1",
      "--set", "training.device=cpu",        "--set", "training.threads=2",  "--set", "predict.split=val",
      "--set", "logging.progress_seconds=0", "--set", "data.train_split=val"};  // 4 patients to load instead of 12:
                                                                                // this checks the plumbing
  std::vector<std::string> args = {"--config", config};
  args.insert(args.end(), overrides.begin(), overrides.end());
  auto r = run_trainer(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OpenKBP dose score and DVH score over 10 structures"), std::string::npos) << r.output;
  const fs::path run = dir / "runs" / "openkbp_baseline";
  const auto rows = test::read_csv(run / "metrics.csv");
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_FALSE(rows[0].at("val_dose_score").empty());
  ASSERT_FALSE(rows[0].at("val_dvh_score").empty());
  const double val_dose_score = std::stod(rows[0].at("val_dose_score"));
  EXPECT_EQ(rows[0].at("best"), "1");

  args.insert(args.end(), {"--predict-only", "--checkpoint", "last"});
  r = run_trainer(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& id : {"pt_201", "pt_202", "pt_203", "pt_204"}) {
    const fs::path csv = run / "predictions" / "openkbp" / (std::string(id) + ".csv");
    ASSERT_TRUE(fs::exists(csv)) << csv;
    const std::string text = test::read_text(csv);
    EXPECT_EQ(text.rfind(",data\n", 0), 0u);
    EXPECT_GT(std::count(text.begin(), text.end(), '\n'), 1000) << csv << ": the network predicts (almost) nothing";
  }
  EXPECT_TRUE(fs::exists(run / "predictions" / "val.h5"));

  const auto from_csv = run_trainer({"evaluate", "openkbp", "--reference", "provided-data/validation-pats",
                                     "--predictions", (run / "predictions" / "openkbp").string()},
                                    dir.path());
  ASSERT_EQ(from_csv.exit_code, 0) << from_csv.output;
  EXPECT_TRUE(fs::exists(run / "predictions" / "openkbp_scores.csv"));
  const auto from_h5 = run_trainer({"evaluate", "openkbp", "--reference", "provided-data/validation-pats",
                                    "--predictions", (run / "predictions" / "val.h5").string()},
                                   dir.path());
  ASSERT_EQ(from_h5.exit_code, 0) << from_h5.output;
  EXPECT_TRUE(fs::exists(run / "predictions" / "val_openkbp_scores.csv"));
  const auto csv_scores = printed_scores(from_csv.output);
  const auto h5_scores = printed_scores(from_h5.output);
  EXPECT_NEAR(csv_scores.first, h5_scores.first, 1e-4);
  EXPECT_NEAR(csv_scores.second, h5_scores.second, 1e-4);
  EXPECT_NEAR(csv_scores.first, val_dose_score, 1e-3 * std::max(1.0, val_dose_score));
  EXPECT_NEAR(csv_scores.second, std::stod(rows[0].at("val_dvh_score")), 1e-3 * std::max(1.0, csv_scores.second));
}

}  // namespace
}  // namespace u3d

namespace u3d {
namespace {

// Choosing the best checkpoint by dose score needs structures to score: a clear error otherwise.
TEST(OpenKbpMonitor, DoseScoreMonitorWithoutStructuresIsAConfigError) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 4, 16);  // phantom channels are not OpenKBP names
  test::write_text(dir / "exp.yaml", test::tiny_config("p.h5", "m"));
  const auto r = test::run_trainer({"--config", "exp.yaml", "--set", "checkpoint.monitor=val_dose_score"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint.monitor: val_dose_score needs the OpenKBP dose metrics"), std::string::npos)
      << r.output;
  // Naming the phantom's target as a DVH structure turns the scores on.
  const auto ok = test::run_trainer({"--config", "exp.yaml", "--set", "checkpoint.monitor=val_dose_score", "--set",
                                     "data.dvh_structures=[target:ptv, spinal_cord]", "--set", "training.epochs=1"},
                                    dir.path());
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  const auto rows = test::read_csv(dir / "runs" / "m" / "metrics.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_FALSE(rows[0].at("val_dose_score").empty());
  EXPECT_FALSE(rows[0].at("val_dvh_score").empty());
  EXPECT_NE(ok.output.find("best val_dose_score"), std::string::npos) << ok.output;
}

}  // namespace
}  // namespace u3d
