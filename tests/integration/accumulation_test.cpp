// training.accumulate_steps end to end through the trainer binary: B/N samples x N micro-batches
// train like one batch of B, and a stop signal in the middle of an accumulated step finishes that
// step, checkpoints it, and the resume continues bit-exactly.
#include <gtest/gtest.h>

#include <csignal>

#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

using test::read_csv;
using test::run_trainer;

class Accumulation : public ::testing::Test {
 protected:
  void SetUp() override { test::make_phantom(dir / "p.h5", Task::kDose, 8, 16); }
  std::vector<std::string> args(const std::string& name, std::vector<std::string> extra) {
    test::write_text(dir / (name + ".yaml"), test::tiny_config("p.h5", name));
    std::vector<std::string> a = {"--config", name + ".yaml",    "--set", "training.steps_per_epoch=3",
                                  "--set",    "training.loss=l1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
  // The network of the checkpoint at `path`, on the CPU.
  std::map<std::string, torch::Tensor> weights(const fs::path& path) const {
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : test::load_network(path)->named_parameters()) out[p.key()] = p.value().detach().clone();
    return out;
  }
  test::TempDir dir;
};

TEST_F(Accumulation, TwoMicroBatchesOfOneTrainLikeOneBatchOfTwo) {
  const auto whole = run_trainer(args("whole", {}), dir.path());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto micro =
      run_trainer(args("micro", {"--set", "data.batch_size=1", "--set", "training.accumulate_steps=2"}), dir.path());
  ASSERT_EQ(micro.exit_code, 0) << micro.output;
  EXPECT_NE(micro.output.find("2 micro-batches of 1 accumulated per optimizer step"), std::string::npos)
      << micro.output;
  const auto a = read_csv(run("whole") / "metrics.csv");
  const auto b = read_csv(run("micro") / "metrics.csv");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].at("step"), a[i].at("step"));  // optimizer steps
    for (const char* col : {"train_loss", "val_loss", "val_mae"}) {
      const double x = std::stod(a[i].at(col)), y = std::stod(b[i].at(col));
      EXPECT_NEAR(y, x, 1e-4 * std::abs(x)) << col << " of epoch " << i + 1;
    }
  }
  const auto wa = weights(run("whole") / "checkpoints" / "epoch_0002.pt");
  const auto wb = weights(run("micro") / "checkpoints" / "epoch_0002.pt");
  for (const auto& [name, p] : wa) EXPECT_TRUE(torch::allclose(wb.at(name), p, 1e-4, 1e-6)) << name;
}

TEST_F(Accumulation, AStopInsideAnAccumulatedStepResumesBitExactly) {
  const std::vector<std::string> accumulate = {"--set", "training.accumulate_steps=2"};
  const auto straight = run_trainer(args("straight", accumulate), dir.path());
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  // SIGTERM while drawing the 3rd micro-batch: the first of optimizer step 2 (of 3 in epoch 1).
  test::ProcessOptions faults;
  faults.env["U3D_TEST_FAULTS"] = "stop_micro@3";
  test::TrainerProcess stopped(args("stopped", accumulate), dir.path(), faults);
  ASSERT_EQ(stopped.wait(), 128 + SIGTERM) << stopped.output();
  // The step was finished, not cut: the checkpoint is after optimizer step 2, inside epoch 1.
  const auto info = read_checkpoint_info(run("stopped") / "checkpoints" / "epoch_0001_step_000002.pt");
  EXPECT_EQ(info.state.global_step, 2);
  EXPECT_EQ(info.state.step_in_epoch, 2);
  EXPECT_EQ(info.sampler.next_sample, 2 * 2 * 2);  // steps x micro-batches x batch size

  const auto resumed = run_trainer(args("stopped", {"--set", "training.accumulate_steps=2", "--resume"}), dir.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto a = read_csv(run("straight") / "metrics.csv");
  const auto b = read_csv(run("stopped") / "metrics.csv");
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* col : {"epoch", "step", "lr", "train_loss", "val_loss", "val_mae"}) {
      EXPECT_EQ(b[i].at(col), a[i].at(col)) << col << " of epoch " << i + 1;
    }
  }
  const auto wa = weights(run("straight") / "checkpoints" / "epoch_0002.pt");
  const auto wb = weights(run("stopped") / "checkpoints" / "epoch_0002.pt");
  for (const auto& [name, p] : wa) EXPECT_TRUE(torch::equal(wb.at(name), p)) << name;
}

}  // namespace
}  // namespace u3d
