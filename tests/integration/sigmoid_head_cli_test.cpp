// model.head: sigmoid through the real binary: a binary phantom trains with [bce, dice] (deep
// supervision, pseudo-Dice) and its validation Dice rises; --predict-only labels at
// predict.threshold; a loss that does not fit the head exits 2 naming the key; and a checkpoint of a
// softmax run written before model.head existed (no such key in its config) still predicts.
#include <gtest/gtest.h>

#include <sstream>

#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/synth.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

using test::read_csv;
using test::run_trainer;

// The organs phantom with every organ as one foreground class: labels {0, 1}.
void write_binary_phantom(const fs::path& path, int64_t cases, int64_t size) {
  DatasetInfo info = phantom_info(Task::kSegmentation);
  info.num_classes = 2;
  info.class_names = {"background", "organ"};
  DatasetWriter writer(path, info);
  std::vector<std::string> train, val;
  for (int64_t i = 0; i < cases; ++i) {
    CaseData c = make_phantom_case(Task::kSegmentation, {size, size, size}, /*seed=*/3, i);
    c.target = c.target.gt(0).to(torch::kUInt8);
    (i < cases - 2 ? train : val).push_back(c.id);
    writer.write_case(c);
  }
  writer.set_split("train", train);
  writer.set_split("val", val);
  writer.commit();
}

std::string sigmoid_config(const std::string& name, int epochs) {
  std::ostringstream s;
  s << "experiment:\n  name: " << name << "\n  seed: 7\n"
    << "data:\n  path: b.h5\n  batch_size: 2\n  patch_size: 16\n  normalize: [zscore]\n  foreground_fraction: 0.5\n"
    << "model:\n  levels: 3\n  base_filters: 4\n  deep_supervision: true\n  head: sigmoid\n"
    << "training:\n  epochs: " << epochs << "\n  steps_per_epoch: 10\n  lr: 0.01\n  loss: [bce, dice]\n"
    << "  threads: 1\n  deterministic: true\n  device: cpu\n  val_patch_batches: 2\n"
    << "logging:\n  progress_seconds: 0\n";
  return s.str();
}

double mean_dice(const fs::path& csv) {
  const auto rows = read_csv(csv);
  EXPECT_FALSE(rows.empty()) << csv;
  return rows.empty() ? -1.0 : std::stod(rows.back().at("dice"));  // the last row is the mean
}

class SigmoidHeadCli : public ::testing::Test {
 protected:
  test::CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
  test::TempDir dir;
};

TEST_F(SigmoidHeadCli, BinaryPhantomTrainsWithBceAndDiceAndPredictsAtTheThreshold) {
  write_binary_phantom(dir / "b.h5", 8, 24);
  test::write_text(dir / "s.yaml", sigmoid_config("s", 30));
  auto r = trainer({"--config", "s.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(run("s") / "metrics.csv");
  ASSERT_EQ(rows.size(), 30u);
  EXPECT_FALSE(rows.back().at("loss_bce").empty());
  EXPECT_FALSE(rows.back().at("loss_dice").empty());
  EXPECT_FALSE(rows.back().at("val_pseudo_dice").empty());
  const double first = std::stod(rows.front().at("val_dice")), last = std::stod(rows.back().at("val_dice"));
  EXPECT_GT(last, first) << r.output;
  EXPECT_GT(last, 0.5) << r.output;
  EXPECT_LT(std::stod(rows.back().at("train_loss")), std::stod(rows.front().at("train_loss")));
  // The network has one output channel (K - 1) and the checkpoint keeps the head.
  const CheckpointInfo info = read_checkpoint_info(run("s") / "checkpoints" / "best.pt");
  EXPECT_EQ(info.out_channels, 2);  // the classes
  EXPECT_EQ(load_config_from_string(info.config_yaml, "ckpt").model.head, Head::kSigmoid);

  r = trainer({"--config", "s.yaml", "--predict-only", "--set", "predict.tta=flips"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("p(channel k - 1) >= 0.5"), std::string::npos) << r.output;
  const double at_half = mean_dice(run("s") / "predictions" / "val_metrics.csv");
  EXPECT_GT(at_half, 0.5);
  // No probability reaches 1 (they are clamped to 1 - 1e-6): nothing is labelled, the Dice falls.
  r = trainer({"--config", "s.yaml", "--predict-only", "--set", "predict.threshold=1", "--set", "predict.tta=none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(mean_dice(run("s") / "predictions" / "val_metrics.csv"), at_half);
}

TEST_F(SigmoidHeadCli, LossesThatDoNotFitTheHeadExitTwoNamingTheKey) {
  write_binary_phantom(dir / "b.h5", 4, 16);
  test::write_text(dir / "s.yaml", sigmoid_config("s", 1));
  for (const std::string& set : {"training.loss=dice_ce", "training.loss=ce", "model.head=softmax"}) {
    const auto r = trainer({"--config", "s.yaml", "--set", set});
    EXPECT_EQ(r.exit_code, 2) << set << "\n" << r.output;
    EXPECT_NE(r.output.find("training.loss: "), std::string::npos) << set << "\n" << r.output;
    EXPECT_NE(r.output.find("model.head"), std::string::npos) << set << "\n" << r.output;
    EXPECT_FALSE(fs::exists(run("s") / "metrics.csv"));
  }
}

TEST_F(SigmoidHeadCli, SoftmaxCheckpointWithoutTheHeadKeyStillPredicts) {
  write_binary_phantom(dir / "b.h5", 4, 16);
  std::string config = sigmoid_config("old", 1);
  config.replace(config.find("  head: sigmoid\n"), 16, "");
  config.replace(config.find("loss: [bce, dice]"), 17, "loss: dice_ce");
  test::write_text(dir / "old.yaml", config);
  auto r = trainer({"--config", "old.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The checkpoint as a build before model.head wrote it: its config has no head key.
  const fs::path ckpt = run("old") / "checkpoints" / "epoch_0001.pt";
  CheckpointInfo info = read_checkpoint_info(ckpt);
  const std::string key = "  head: softmax\n";
  ASSERT_NE(info.config_yaml.find(key), std::string::npos) << info.config_yaml;
  info.config_yaml.replace(info.config_yaml.find(key), key.size(), "");
  const Config trained = load_config_from_string(info.config_yaml, "old checkpoint");
  EXPECT_EQ(trained.model.head, Head::kSoftmax);
  Network net = build_network(trained.model, info.in_channels, info.out_channels);  // 2 channels, as before
  load_checkpoint(ckpt, *net, nullptr, torch::kCPU, /*restore_rng=*/false);
  save_checkpoint(dir / "old.pt", info, *net, nullptr);
  r = trainer({"--config", "old.yaml", "--predict-only", "--checkpoint", "old.pt"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run("old") / "predictions" / "val_metrics.csv"));
}

}  // namespace
}  // namespace u3d
