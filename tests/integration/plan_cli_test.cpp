// `trainer plan` end to end: a phantom dataset in, a commented YAML out that trains as is (a few
// CPU steps); the fingerprint is kept beside the data; outputs are never clobbered silently.
#include <gtest/gtest.h>

#include "test_support.h"

namespace u3d {
namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

class PlanCli : public ::testing::Test {
 protected:
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  test::TempDir dir;
};

TEST_F(PlanCli, PlannedConfigTrainsAsIsAndOutputsAreNotClobbered) {
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 8, 16);
  auto r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "median shape")) << r.output;  // the fingerprint table
  EXPECT_TRUE(fs::exists(dir / "seg.h5.fingerprint.json"));
  const std::string yaml = test::read_text(dir / "seg.yaml");
  EXPECT_TRUE(contains(yaml, "patch_size: [16, 16, 16]")) << yaml;
  EXPECT_TRUE(contains(yaml, "# ")) << "every choice carries its reason";
  // As written, only shortened (steps) and made small enough for a test machine.
  r = trainer({"--config", "seg.yaml", "--set", "training.epochs=1", "--set", "training.steps_per_epoch=2", "--set",
               "training.val_patch_batches=1", "--set", "training.device=cpu", "--set", "training.threads=1", "--set",
               "model.base_filters=4", "--set", "model.max_filters=16", "--set", "logging.progress_seconds=0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs" / "seg" / "checkpoints" / "epoch_0001.pt"));

  // A second plan reuses the fingerprint and refuses to replace the YAML without --force.
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "seg.yaml exists; pass --force")) << r.output;
  EXPECT_EQ(test::read_text(dir / "seg.yaml"), yaml);
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "read from")) << r.output;

  // Bad input: one line, exit 2.
  r = trainer({"plan", "missing.h5"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "missing.h5: no such dataset file")) << r.output;
  r = trainer({"plan", "seg.h5", "--device", "tpu"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = trainer({"plan", "seg.h5", "--task", "dose", "--out", "d.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(dir / "d.yaml"));
}

}  // namespace
}  // namespace u3d
