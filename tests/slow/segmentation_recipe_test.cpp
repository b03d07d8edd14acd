// The nnU-Net-like recipe (configs/segmentation_nnunet_like.yaml), scaled down to the segmentation
// phantoms, learns to segment them on a CPU: mean validation Dice above 0.8.
#include <gtest/gtest.h>

#include "test_support.h"

namespace u3d {
namespace {

TEST(SegmentationRecipe, ReachesDiceAboveEightyPercentOnThePhantoms) {
  test::TempDir dir;
  auto r = test::run_trainer({"synth", "--task", "segmentation", "--cases", "24", "--size", "32", "--out", "seg.h5"},
                             dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string recipe = (test::source_dir() / "configs" / "segmentation_nnunet_like.yaml").string();
  // The recipe (deep supervision, Dice + CE, foreground oversampling, pseudo-Dice EMA for the best
  // checkpoint, Gaussian sliding window with mirror TTA) with the sizes a CPU test can afford:
  // 32^3 phantoms, 4 levels of 8 to 64 filters, 20 epochs of 20 steps; and its AdamW variant,
  // which converges in these few hundred steps (SGD with momentum 0.99 needs more: it learns the
  // liver first and stays there for about 300 steps).
  const std::vector<std::string> sizes = {"--set", "data.path=seg.h5",
                                          "--set", "data.patch_size=32",
                                          "--set", "model.levels=4",
                                          "--set", "model.base_filters=8",
                                          "--set", "training.epochs=20",
                                          "--set", "training.steps_per_epoch=20",
                                          "--set", "training.optimizer=adamw",
                                          "--set", "training.lr=0.003",
                                          "--set", "training.weight_decay=0.0001",
                                          "--set", "training.val_patch_batches=4",
                                          "--set", "training.val_every=20",
                                          "--set", "checkpoint.every_epochs=20",
                                          "--set", "training.threads=2",
                                          "--set", "logging.progress_seconds=0"};
  std::vector<std::string> args = {"--config", recipe};
  args.insert(args.end(), sizes.begin(), sizes.end());
  r = test::run_trainer(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  args.push_back("--predict-only");
  r = test::run_trainer(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = test::read_csv(dir / "runs" / "nnunet_like" / "predictions" / "val_metrics.csv");
  ASSERT_FALSE(rows.empty());
  const auto& mean = rows.back();
  ASSERT_EQ(mean.at("case"), "mean");
  const double dice = std::stod(mean.at("dice"));
  RecordProperty("val_mean_dice", std::to_string(dice));
  EXPECT_GT(dice, 0.8) << r.output;
}

}  // namespace
}  // namespace u3d
