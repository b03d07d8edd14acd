// Library text under real faults (issue 35, the cli package): a log file that cannot be written is
// one warning line of ours, never spdlog's "LOG ERROR" block.
#include <fmt/format.h>

#include "fault_support.h"

namespace u3d {
namespace {

class CliFaults : public test::PhantomRunTest {};

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// A train.log that cannot grow (RLIMIT_FSIZE: File too large) under a console that can: one warning
// of ours, once, and the run's own error line; spdlog's "[*** LOG ERROR #0001 ***]" block is gone.
TEST_F(CliFaults, ALogFileThatCannotBeWrittenIsOneWarningLine) {
  // logging.level debug: the full resolved config goes to train.log, which outgrows the 4 KB limit
  // before any checkpoint is written.
  config("tiny", {{"training.epochs", "2"}, {"logging.level", "debug"}});
  test::ProcessOptions shell;
  shell.program = "/bin/bash";
  // The limit holds for the trainer only; `cat` copies its console to the test's log unlimited.
  test::TrainerProcess p(
      {"-c", "set -o pipefail; (trap '' XFSZ; ulimit -f 4; exec \"$0\" --config tiny.yaml) 2>&1 | cat",
       test::trainer_path().string()},
      dir.path(), shell);
  EXPECT_EQ(p.wait(), 1);
  const std::string out = p.output();
  EXPECT_EQ(occurrences(out, "LOG ERROR"), 0u) << out;
  EXPECT_EQ(occurrences(out,
                        "the log file cannot be written (File too large); further log lines go to the "
                        "console only"),
            1u)
      << out;
  EXPECT_EQ(occurrences(out, "[error]"), 1u) << out;
  EXPECT_TRUE(test::contains(out, "write failed: File too large")) << out;
}

}  // namespace
}  // namespace u3d
