// The stop message names the exact command that continues the run: a run started with --set
// overrides and stopped by SIGINT goes on with the printed command, run as printed by a shell.
#include <fmt/format.h>
#include <signal.h>

#include <regex>

#include "fault_support.h"

namespace u3d {
namespace {

using test::TrainerProcess;

class ContinueCommand : public test::PhantomRunTest {
 protected:
  size_t steps_logged(const std::string& name) const {
    const fs::path p = run(name) / "steps.csv";
    return fs::exists(p) ? test::count_lines(p) - 1 : 0;
  }
};

TEST_F(ContinueCommand, RunStartedWithOverridesContinuesWithThePrintedCommand) {
  config("c", {{"training.epochs", "2"}, {"training.steps_per_epoch", "2000"}, {"logging.step_log", "true"}});
  // training.lr is no runtime key: a bare `--config c.yaml --resume` is refused by the drift check.
  std::string command;
  size_t stopped_at = 0;
  {
    TrainerProcess p({"--config", "c.yaml", "--set", "training.lr=0.002", "--set", "experiment.description=a b"},
                     dir.path());
    ASSERT_TRUE(p.wait_until([&] { return steps_logged("c") >= 5; })) << p.output();
    p.signal(SIGINT);
    ASSERT_EQ(p.wait(), 130) << p.output();
    std::smatch m;
    const std::string out = p.output();
    ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped by SIGINT at .*; continue with: ([^\n]*)"))) << out;
    command = m[1];
    stopped_at = steps_logged("c");
  }
  EXPECT_EQ(command, test::trainer_path().string() +
                         " --config c.yaml --set 'experiment.description=a b' --set training.lr=0.002 --resume");
  EXPECT_EQ(trainer({"--config", "c.yaml", "--resume"}).exit_code, 2);  // what the old message said

  test::ProcessOptions shell;
  shell.program = "/bin/sh";
  TrainerProcess p({"-c", "exec " + command}, dir.path(), shell);
  ASSERT_TRUE(p.wait_until([&] { return steps_logged("c") >= stopped_at + 3; })) << p.output();
  p.signal(SIGTERM);
  ASSERT_EQ(p.wait(), 143) << p.output();
  EXPECT_TRUE(test::contains(p.output(), fmt::format("inside epoch 1 after step {}", stopped_at))) << p.output();
  EXPECT_TRUE(test::contains(p.output(), "continue with: " + command)) << p.output();
  const auto rows = test::read_csv(run("c") / "steps.csv");
  for (size_t k = 0; k < rows.size(); ++k) ASSERT_EQ(rows[k].at("step"), std::to_string(k + 1));
}

}  // namespace
}  // namespace u3d
