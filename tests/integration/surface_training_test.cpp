// Thin-surface training end to end on `trainer synth --task surface` phantoms (labels 0, 1 and the
// ignore label 2): a training.loss list with every segmentation term logs each term per epoch in
// metrics.csv, the terms add up to train_loss, elastic augmentation and the pseudo-Dice run with the
// ignore label, and prediction with post-processing scores the cases.
#include <gtest/gtest.h>

#include <cmath>

#include "test_support.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

using test::read_csv;

std::string surface_config() {
  std::string yaml = test::tiny_config("s.h5", "surf", Task::kSegmentation);
  const std::string training = "training:\n";
  const auto at = yaml.find(training);
  yaml.insert(at + training.size(),
              "  loss:\n"
              "    - {name: ce, weight: 1}\n"
              "    - {name: dice, weight: 1}\n"
              "    - {name: cldice, weight: 0.5}\n"
              "    - {name: skeleton_recall, weight: 1}\n"
              "    - {name: boundary, weight: 0.1}\n"
              "  class_weights: [1, 3]\n"
              "  skeleton_iterations: 2\n"
              "  val_patch_batches: 2\n"
              "  steps_per_epoch: 3\n");
  yaml += "augment:\n  elastic_prob: 1\n  elastic_magnitude: 2\n  elastic_grid: 3\n";
  return yaml;
}

TEST(SurfaceTraining, EveryLossTermIsLoggedAndTheyAddUpToTheTrainLoss) {
  test::TempDir dir;
  auto r =
      test::run_trainer({"synth", "--task", "surface", "--cases", "6", "--size", "16", "--out", "s.h5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    const DatasetReader reader(dir / "s.h5");
    ASSERT_EQ(reader.info().ignore_label, 2);
    ASSERT_EQ(reader.info().num_classes, 2);
  }
  test::write_text(dir / "surf.yaml", surface_config());
  r = test::run_trainer({"--config", "surf.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // skeleton_recall and boundary read the ground-truth maps the cache made once per case.
  EXPECT_NE(r.output.find("skeleton uint8, distance[1] float16"), std::string::npos) << r.output;
  const auto rows = read_csv(dir / "runs" / "surf" / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  const std::vector<std::pair<std::string, double>> terms = {{"loss_ce", 1.0},
                                                             {"loss_dice", 1.0},
                                                             {"loss_cldice", 0.5},
                                                             {"loss_skeleton_recall", 1.0},
                                                             {"loss_boundary", 0.1}};
  for (const auto& row : rows) {
    double weighted = 0;
    for (const auto& [column, weight] : terms) {
      ASSERT_TRUE(row.count(column)) << column << " missing from metrics.csv";
      const double v = std::stod(row.at(column));
      EXPECT_TRUE(std::isfinite(v)) << column;
      weighted += weight * v;
    }
    // Means of a linear combination: the terms' weighted sum is the train loss.
    EXPECT_NEAR(weighted, std::stod(row.at("train_loss")), 1e-4 * std::max(1.0, std::abs(weighted)));
    const double pseudo = std::stod(row.at("val_pseudo_dice"));
    EXPECT_TRUE(pseudo >= 0 && pseudo <= 1) << pseudo;
  }
  // Prediction with post-processing: every val case scored, labels within the classes.
  r = test::run_trainer({"--config", "surf.yaml", "--predict-only", "--set", "predict.min_component_size=3"},
                        dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto scored = read_csv(dir / "runs" / "surf" / "predictions" / "val_metrics.csv");
  EXPECT_GE(scored.size(), 2u);  // at least one case and the mean
}

TEST(SurfaceTraining, WithoutCachedMapsTheTermsMakeThemPerBatch) {
  test::TempDir dir;
  auto r =
      test::run_trainer({"synth", "--task", "surface", "--cases", "4", "--size", "16", "--out", "s.h5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::write_text(dir / "surf.yaml", surface_config());
  r = test::run_trainer(
      {"--config", "surf.yaml", "--set", "training.cache_truth_maps=false", "--set", "training.epochs=1"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("skeleton uint8"), std::string::npos) << r.output;
  const auto rows = read_csv(dir / "runs" / "surf" / "metrics.csv");
  ASSERT_EQ(rows.size(), 1u);
  for (const char* column : {"loss_skeleton_recall", "loss_boundary"}) {
    EXPECT_TRUE(std::isfinite(std::stod(rows[0].at(column)))) << column;
  }
}

TEST(SurfaceTraining, AListTermThatDoesNotFitTheTaskIsOneLineExit2) {
  test::TempDir dir;
  test::make_phantom(dir / "d.h5", Task::kDose, 4, 16);
  std::string yaml = test::tiny_config("d.h5", "bad", Task::kDose);
  yaml.insert(yaml.find("training:\n") + 10, "  loss: [{name: cldice, weight: 1}]\n");
  test::write_text(dir / "bad.yaml", yaml);
  const auto r = test::run_trainer({"--config", "bad.yaml"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.loss: term 'cldice' does not fit a dose dataset"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "runs" / "bad" / "metrics.csv"));
}

}  // namespace
}  // namespace u3d
