// The run commands as subcommands (`trainer train | resume | predict | benchmark`) beside the root
// flags they replace, which stay as aliases; --help's workflow order; --verbose and --quiet.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace u3d {
namespace {

class Subcommands : public ::testing::Test {
 protected:
  void SetUp() override { test::make_phantom(dir / "p.h5", Task::kDose, 6, 16); }
  std::string config(const std::string& name) {
    test::write_text(dir / (name + ".yaml"), test::tiny_config("p.h5", name));
    return name + ".yaml";
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  static void expect_usage_error(const test::CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << "one error line: " << r.output;
  }
  std::string text(const std::string& relative) { return test::read_text(dir / relative); }
  test::TempDir dir;
};

TEST_F(Subcommands, HelpListsTheCommandsInWorkflowOrder) {
  const auto r = trainer({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t last = 0;
  for (const std::string name : {"synth", "import", "check-data", "plan", "train", "resume", "predict", "evaluate",
                                 "export", "benchmark", "bench-norm", "plot", "config-reference"}) {
    const size_t at = r.output.find("\n  " + name + " ");
    ASSERT_NE(at, std::string::npos) << name << " missing:\n" << r.output;
    EXPECT_GT(at, last) << name << " out of workflow order:\n" << r.output;
    last = at;
  }
  // The root flags are listed as what they are: aliases of the commands.
  EXPECT_NE(r.output.find("Run flags (the same as the train, resume, predict, benchmark commands)"), std::string::npos);
  for (const std::string sub : {"train", "resume", "predict", "benchmark"}) {
    const auto h = trainer({sub, "--help"});
    EXPECT_EQ(h.exit_code, 0) << h.output;
    EXPECT_NE(h.output.find("--config"), std::string::npos) << h.output;
  }
  EXPECT_NE(trainer({"predict", "--help"}).output.find("-i,--input"), std::string::npos);
}

TEST_F(Subcommands, EachCommandDoesWhatItsRootFlagDoes) {
  // train = --config: the same run, step for step.
  auto r = trainer({"train", "-c", config("a")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"--config", config("b")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = test::read_csv(dir / "runs" / "a" / "metrics.csv");
  const auto b = test::read_csv(dir / "runs" / "b" / "metrics.csv");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].at("train_loss"), b[i].at("train_loss"));

  // resume CHECKPOINT = --resume CHECKPOINT: the second epoch again, into a new run.
  r = trainer({"resume", "-c", config("c"), (dir / "runs" / "a" / "checkpoints" / "epoch_0001.pt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto c = test::read_csv(dir / "runs" / "c" / "metrics.csv");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].at("train_loss"), a[1].at("train_loss"));
  // resume without a run to continue answers as --resume does.
  const auto sub = trainer({"resume", "-c", config("d")});
  const auto flag = trainer({"--config", "d.yaml", "--resume"});
  EXPECT_EQ(sub.exit_code, 2) << sub.output;
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_EQ(sub.output.substr(sub.output.find("[error]")), flag.output.substr(flag.output.find("[error]")));

  // predict -c = --predict-only: the same predictions of the same checkpoint.
  r = trainer({"predict", "-c", "a.yaml", "--checkpoint", "last"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string metrics = text("runs/a/predictions/val_metrics.csv");
  EXPECT_FALSE(metrics.empty());
  r = trainer({"--config", "a.yaml", "--predict-only", "--checkpoint", "last"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(text("runs/a/predictions/val_metrics.csv"), metrics);

  // benchmark [step|data] = --benchmark [step|data].
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"benchmark", "-c", "a.yaml", "--steps", "2", "--warmup", "1"},
           {"--config", "a.yaml", "--benchmark", "--steps", "2", "--warmup", "1"},
           {"benchmark", "data", "-c", "a.yaml", "--benchmark-seconds", "0.2", "--workers", "1"},
           {"--config", "a.yaml", "--benchmark", "data", "--benchmark-seconds", "0.2", "--workers", "1"}}) {
    r = trainer(args);
    EXPECT_EQ(r.exit_code, 0) << fmt::format("{}", fmt::join(args, " ")) << "\n" << r.output;
  }
}

TEST_F(Subcommands, MixedFormsAreOneLineUsageErrors) {
  config("a");
  expect_usage_error(trainer({"train"}), "--config is required");
  expect_usage_error(trainer({"train", "-c", "a.yaml", "--predict-only"}), "--predict-only");
  expect_usage_error(trainer({"predict", "-c", "a.yaml", "-i", "imgs"}), "go with predict -c");
  expect_usage_error(trainer({"predict", "-c", "a.yaml", "-o", "out"}),
                     "-o, --device, --force and --structures go with -i");
  expect_usage_error(trainer({"predict", "--run", "runs/a"}), "--run and --model need -i");
  expect_usage_error(trainer({"benchmark", "tea", "-c", "a.yaml"}), "'tea': expected one of step, data");
  expect_usage_error(trainer({"train", "-c", "a.yaml", "-v", "-q"}), "--verbose and --quiet cannot be combined");
  EXPECT_FALSE(fs::exists(dir / "runs"));
}

TEST_F(Subcommands, VerboseShowsEverythingAndQuietOnlyWarnings) {
  auto r = trainer({"train", "-c", config("q"), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("[info]"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs" / "q" / "checkpoints" / "best.pt"));
  r = trainer({"-v", "train", "-c", config("v")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[debug]"), std::string::npos) << r.output;
  // The full resolved config, defaults included (the quiet banner lists only the keys that differ).
  EXPECT_NE(r.output.find("augment.elastic_grid"), std::string::npos) << r.output;
  r = trainer({"train", "-c", config("n")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("[debug]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("augment.elastic_grid"), std::string::npos) << r.output;
  // Commands without a config take them too.
  r = trainer({"synth", "--cases", "2", "--size", "8", "--out", "s.h5", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("[info]"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace u3d
