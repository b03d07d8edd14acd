// End-to-end runs of the trainer binary on tiny phantoms: training lowers the loss, resume
// continues exactly, predict-only writes its outputs.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/model/checkpoint.h"

namespace u3d {
namespace {

using test::read_csv;

class Training : public test::PhantomCli {
 protected:
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
};

TEST_F(Training, ShortTrainingLowersTheLossAndWritesTheRunFolder) {
  const auto r = train("a", {"--set", "training.epochs=6"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(run("a") / "metrics.csv");
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_LT(std::stod(rows.back().at("train_loss")), std::stod(rows.front().at("train_loss")));
  EXPECT_LT(std::stod(rows.back().at("val_mae")), std::stod(rows.front().at("val_mae")));
  for (const char* col :
       {"epoch", "step", "lr", "train_loss", "val_loss", "val_mae", "epoch_seconds", "samples_per_second"}) {
    EXPECT_FALSE(rows.back().at(col).empty()) << col;
  }
  EXPECT_TRUE(fs::exists(run("a") / "config.yaml"));
  EXPECT_TRUE(fs::exists(run("a") / "train.log"));
  EXPECT_TRUE(fs::exists(run("a") / "checkpoints" / "best.pt"));
  // The resolved config in the run folder loads back to the config that ran.
  const Config saved = load_config(run("a") / "config.yaml");
  EXPECT_EQ(saved.training.epochs, 6);
  // The start banner lists only the settings that differ from the defaults, each with its default.
  EXPECT_NE(r.output.find("resolved config in runs/a/config.yaml; "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training.epochs: " + get_value(Config{}, "training.epochs") + " -> 6"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("logging.tensorboard_steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device cpu"), std::string::npos);
  EXPECT_NE(test::read_text(run("a") / "train.log").find("epoch 6/6"), std::string::npos);
}

TEST_F(Training, ResumeContinuesEpochStepAndLrExactly) {
  // Straight run of 4 epochs, keeping every checkpoint.
  ASSERT_EQ(train("straight", {"--set", "training.epochs=4"}).exit_code, 0);
  // A second run that starts from the straight run's epoch-2 checkpoint and trains to epoch 4.
  const auto ckpt = run("straight") / "checkpoints" / "epoch_0002.pt";
  ASSERT_TRUE(fs::exists(ckpt));
  const auto r = train("resumed", {"--set", "training.epochs=4", "--resume", ckpt.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = read_csv(run("straight") / "metrics.csv");
  const auto b = read_csv(run("resumed") / "metrics.csv");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    for (const char* col : {"epoch", "step", "lr", "train_loss", "val_loss", "val_mae"}) {
      EXPECT_EQ(b[i].at(col), a[i + 2].at(col)) << col << " of epoch " << i + 3;
    }
  }
}

TEST_F(Training, ResumeInPlaceKeepsOneRowPerEpoch) {
  ASSERT_EQ(train("r", {"--set", "training.epochs=2"}).exit_code, 0);
  // Simulate rows written after the last checkpoint (a crash before the next one): dropped on resume.
  {
    std::ofstream out(run("r") / "metrics.csv", std::ios::app);
    out << "3,99,0.1,1,1,1,0,1,0,1,0\n4,13";
  }
  const auto r = train("r", {"--set", "training.epochs=4", "--resume", "--allow-config-change", "training.epochs"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(run("r") / "metrics.csv");
  ASSERT_EQ(rows.size(), 4u);
  const int64_t steps_per_epoch = std::stoll(rows[0].at("step"));
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("epoch"), std::to_string(i + 1));
    EXPECT_EQ(std::stoll(rows[i].at("step")), steps_per_epoch * static_cast<int64_t>(i + 1));
  }
  const auto info = read_checkpoint_info(run("r") / "checkpoints" / "epoch_0004.pt");
  EXPECT_EQ(info.state.epoch, 4);
  EXPECT_EQ(info.state.global_step, 4 * steps_per_epoch);
}

TEST_F(Training, PredictOnlyWritesPredictionsAndMetrics) {
  ASSERT_EQ(train("p", {"--set", "training.epochs=3"}).exit_code, 0);
  const auto r = trainer({"--config", "p.yaml", "--predict-only", "--checkpoint", "last"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("baseline (predict the training mean)"), std::string::npos) << r.output;
  const auto pred = run("p") / "predictions" / "val.h5";
  ASSERT_TRUE(fs::exists(pred));
  const auto rows = read_csv(run("p") / "predictions" / "val_metrics.csv");
  ASSERT_EQ(rows.size(), 3u);  // 2 val cases + mean
  EXPECT_EQ(rows.back().at("case"), "mean");
  EXPECT_GT(std::stod(rows.back().at("mae")), 0.0);
}

// Issue 35, defect 8: training.skeleton_iterations is bounded by the table (at most 512) and, for a
// loss with cldice or skeleton_recall, by half the largest patch edge: beyond it an iteration changes
// nothing and keeps patch-sized tensors for the backward pass (10,000 grew the graph to 20 GB).
// Either is a config error (exit 2) before the run folder is made.
TEST_F(Training, SkeletonIterationsBeyondHalfThePatchEdgeAreAConfigError) {
  test::make_phantom(dir / "s.h5", Task::kSegmentation, 6, 16);
  std::string yaml = test::tiny_config("s.h5", "sk", Task::kSegmentation);
  yaml.insert(yaml.find("training:\n") + 10, "  loss: [{name: ce, weight: 1}, {name: cldice, weight: 0.5}]\n");
  test::write_text(dir / "sk.yaml", yaml);
  auto r = trainer({"--config", "sk.yaml", "--set", "training.skeleton_iterations=9", "--set", "training.epochs=1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.skeleton_iterations 9 is more than half the largest edge of data.patch_size "
                          "(16, 16, 16) (8): iterations beyond it change nothing"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(run("sk") / "checkpoints"));
  r = trainer({"--config", "sk.yaml", "--set", "training.skeleton_iterations=100000"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training.skeleton_iterations"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run("sk") / "checkpoints"));
  r = trainer({"--config", "sk.yaml", "--set", "training.skeleton_iterations=8", "--set", "training.epochs=1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Issue 35: a failed export (here its ONNX step) leaves the previous export as it was, never a mix
// of old and new model files, and no staging folder.
TEST_F(Training, AFailedExportLeavesThePreviousExportAsItWas) {
  ASSERT_EQ(train("x", {"--set", "training.epochs=2"}).exit_code, 0);
  auto r =
      trainer({"export", "runs/x", "--checkpoint", "runs/x/checkpoints/epoch_0001.pt", "--format", "safetensors,pt"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path out = run("x") / "export";
  test::write_text(out / "model.onnx", "the ONNX file of that earlier export");
  std::map<std::string, std::string> before;
  for (const char* f : {"model.pt", "model.safetensors", "model.onnx"}) before[f] = test::read_text(out / f);
  test::ProcessOptions no_python;
  no_python.env["U3D_PYTHON"] = "false";  // the ONNX step fails
  test::TrainerProcess p({"export", "runs/x", "--format", "safetensors,pt,onnx"}, dir.path(), no_python);
  EXPECT_EQ(p.wait(), 1) << p.output();
  EXPECT_NE(p.output().find("export onnx:"), std::string::npos) << p.output();
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"model.onnx", "model.pt", "model.safetensors"}));
  for (const auto& [f, bytes] : before) EXPECT_TRUE(test::read_text(out / f) == bytes) << f << " was replaced";
}

// Issue 35 (the paths class): the ONNX step runs its Python without a shell, so an output folder
// whose name holds a quote, a space or `$` is passed as it is (a shell command broke on it).
TEST_F(Training, ExportRunsTheOnnxStepWithoutAShell) {
  ASSERT_EQ(train("q", {"--set", "training.epochs=1"}).exit_code, 0);
  // Stands in for python3 export_onnx.py MODEL_PT --out OUT.
  test::write_text(dir / "fake_python", "#!/bin/sh\n[ \"$3\" = --out ] && [ -f \"$2\" ] && printf onnx > \"$4\"\n");
  fs::permissions(dir / "fake_python", fs::perms::owner_all);
  test::ProcessOptions fake;
  fake.env["U3D_PYTHON"] = (dir / "fake_python").string();
  const std::string out = "it's a $HOME";
  test::TrainerProcess p({"export", "runs/q", "--format", "onnx", "--out", out}, dir.path(), fake);
  ASSERT_EQ(p.wait(), 0) << p.output();
  EXPECT_EQ(test::read_text(dir / out / "model.onnx"), "onnx");
  EXPECT_TRUE(fs::exists(dir / out / "model.pt"));  // what the ONNX step read
}

TEST_F(Training, SegmentationRunsEndToEnd) {
  test::make_phantom(dir / "s.h5", Task::kSegmentation, 6, 16);
  test::write_text(dir / "s.yaml", test::tiny_config("s.h5", "seg", Task::kSegmentation));
  auto r = trainer({"--config", "s.yaml", "--set", "training.epochs=2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(run("seg") / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  const double dice = std::stod(rows.back().at("val_dice"));
  EXPECT_GE(dice, 0.0);
  EXPECT_LE(dice, 1.0);
  r = trainer({"--config", "s.yaml", "--predict-only"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run("seg") / "predictions" / "val.h5"));
}

}  // namespace
}  // namespace u3d
