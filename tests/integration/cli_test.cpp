// The trainer binary's command line and its answers to bad input: a one-line message naming the
// file, key or case, and exit code 2 (usage/config) or 1 (runtime).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"
#include "u3d/core/parallel.h"

namespace u3d {
namespace {

using test::run_trainer;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    test::make_phantom(dir / "p.h5", Task::kDose, 6, 16);
    test::write_text(dir / "exp.yaml", test::tiny_config("p.h5", "run1"));
  }
  // The last line of output holds the error; exactly one error line.
  static void expect_error(const test::CommandResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    size_t errors = 0;
    for (size_t p = r.output.find("[error]"); p != std::string::npos; p = r.output.find("[error]", p + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("Exception raised from"), std::string::npos) << r.output;  // no torch backtrace
  }
  test::TempDir dir;
};

TEST_F(Cli, VersionAndHelp) {
  auto r = run_trainer({"--version"}, dir.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("trainer 0."), std::string::npos) << r.output;
  r = run_trainer({"--help"}, dir.path());
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt : {"--config", "--resume", "--predict-only", "--checkpoint", "--set", "synth"}) {
    EXPECT_NE(r.output.find(opt), std::string::npos) << opt;
  }
}

TEST_F(Cli, NoConfigIsAUsageError) {
  expect_error(run_trainer({}, dir.path()), 2, "--config is required");
  EXPECT_EQ(run_trainer({"--no-such-flag"}, dir.path()).exit_code, 2);
}

TEST_F(Cli, MissingConfigFile) {
  expect_error(run_trainer({"--config", "nope.yaml"}, dir.path()), 2, "nope.yaml not found");
}

TEST_F(Cli, YamlSyntaxError) {
  test::write_text(dir / "bad.yaml", "data:\n  path: p.h5\n  batch_size: [1, 2\n");
  expect_error(run_trainer({"--config", "bad.yaml"}, dir.path()), 2, "bad.yaml:");
}

TEST_F(Cli, UnknownKeyWithSuggestion) {
  test::write_text(dir / "bad.yaml", "data:\n  path: p.h5\n  patchsize: 16\n");
  expect_error(run_trainer({"--config", "bad.yaml"}, dir.path()), 2, "did you mean 'data.patch_size'");
}

TEST_F(Cli, WrongTypeAndRange) {
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "training.lr=fast"}, dir.path()), 2,
               "training.lr: expected a finite number");
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "data.batch_size=0"}, dir.path()), 2,
               "data.batch_size: 0 is not allowed; must be >= 1");
}

TEST_F(Cli, MissingDatasetFile) {
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "data.path=missing.h5"}, dir.path()), 2,
               "dataset file missing.h5 not found");
}

TEST_F(Cli, DatasetLackingSplitOrChannel) {
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "data.val_split=holdout"}, dir.path()), 2,
               "split 'holdout' is not in p.h5; it has: train, val");
  expect_error(
      run_trainer({"--config", "exp.yaml", "--set", "data.channels=[ct,liver]", "--set", "data.normalize=[none]"},
                  dir.path()),
      2, "channel 'liver' is not in the dataset");
}

TEST_F(Cli, CorruptDatasetNamesTheFile) {
  test::write_text(dir / "broken.h5", "definitely not HDF5");
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "data.path=broken.h5"}, dir.path()), 1,
               "broken.h5: not an HDF5 file");
}

// A patch larger than the volumes: the cases are padded up to it, as nnU-Net pads them, and said so.
TEST_F(Cli, PatchLargerThanTheVolumeIsPadded) {
  const auto r = run_trainer({"--config", "exp.yaml", "--set", "data.patch_size=[16, 24, 32]"}, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cases are smaller than the patch (16, 24, 32) on an axis: padded up to it, centred"),
            std::string::npos)
      << r.output;
}

TEST_F(Cli, ResumeWithoutCheckpointIsAnErrorNotAFreshStart) {
  expect_error(run_trainer({"--config", "exp.yaml", "--resume"}, dir.path()), 2, "no checkpoint found");
  EXPECT_FALSE(fs::exists(dir / "runs" / "run1" / "checkpoints" / "epoch_0001.pt"));
  expect_error(run_trainer({"--config", "exp.yaml", "--resume", "nowhere.pt"}, dir.path()), 2,
               "nowhere.pt: checkpoint not found");
}

TEST_F(Cli, PredictWithoutCheckpoint) {
  expect_error(run_trainer({"--config", "exp.yaml", "--predict-only"}, dir.path()), 2, "no checkpoint found");
}

TEST_F(Cli, UnwritableOutputFolder) {
  test::write_text(dir / "blocker", "a file where the output folder should be");
  expect_error(run_trainer({"--config", "exp.yaml", "--set", "experiment.output_dir=blocker/runs"}, dir.path()), 1,
               "blocker/runs/run1: cannot create folder");
}

TEST_F(Cli, ExistingRunIsNotOverwritten) {
  ASSERT_EQ(run_trainer({"--config", "exp.yaml", "--set", "training.epochs=1"}, dir.path()).exit_code, 0);
  const auto before = fs::last_write_time(dir / "runs" / "run1" / "checkpoints" / "epoch_0001.pt");
  expect_error(run_trainer({"--config", "exp.yaml"}, dir.path()), 2, "continue it with --resume");
  EXPECT_EQ(fs::last_write_time(dir / "runs" / "run1" / "checkpoints" / "epoch_0001.pt"), before);
}

TEST_F(Cli, SynthWritesAndRefusesToOverwrite) {
  auto r = run_trainer({"synth", "--task", "segmentation", "--cases", "4", "--size", "8,12,16", "--out", "s.h5"},
                       dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader reader(dir / "s.h5");
  EXPECT_EQ(reader.info().task, Task::kSegmentation);
  EXPECT_EQ(reader.case_shape("case_000"), (Shape3{8, 12, 16}));
  expect_error(run_trainer({"synth", "--out", "s.h5"}, dir.path()), 2, "pass --force");
  EXPECT_EQ(run_trainer({"synth", "--out", "s.h5", "--force", "--cases", "3"}, dir.path()).exit_code, 0);
  EXPECT_EQ(DatasetReader(dir / "s.h5").info().case_ids.size(), 3u);
  expect_error(run_trainer({"synth", "--out", "t.h5", "--task", "detection"}, dir.path()), 2,
               "expected dose, segmentation, surface or kits");
}

TEST_F(Cli, ConfigReferenceListsKeysAndMatchesTheDocs) {
  const auto r = run_trainer({"config-reference"}, dir.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("`training.epochs`"), std::string::npos);
  // docs/config.md is this output; regenerate it with `trainer config-reference > docs/config.md`.
  EXPECT_EQ(r.output, test::read_text(test::source_dir() / "docs" / "config.md"));
}

// Settings over the cores are kept, and warned about in one line naming both keys.
TEST_F(Cli, ThreadSettingsOverTheCoresAreKeptAndWarned) {
  const int64_t n = 2 * core_count();
  const auto r = run_trainer({"--config", "exp.yaml", "--set", "training.epochs=1", "--set",
                              "training.steps_per_epoch=1", "--set", "training.device=cpu", "--set",
                              fmt::format("training.threads={}", n), "--set", fmt::format("data.workers={}", n)},
                             dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string line = fmt::format("threads: {} intra-op + {} loader workers of {} core", n, n, core_count());
  EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  const std::string warning =
      fmt::format("training.threads {} + data.workers {} = {} threads on {} core", n, n, 2 * n, core_count());
  EXPECT_NE(r.output.find(warning), std::string::npos) << r.output;
}

}  // namespace
}  // namespace u3d
