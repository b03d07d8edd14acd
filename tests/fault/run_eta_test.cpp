// The run's ETA counts the validations still to come at their measured time, never a guess: a real
// trainer whose validation is slowed (the slow_val fault: 2 val cases x 3 s) and plain progress lines.
#include <regex>

#include "fault_support.h"

namespace u3d {
namespace {

class RunEta : public test::PhantomRunTest {};

TEST_F(RunEta, CountsTheMeasuredValidationOfEachEpochLeft) {
  config("eta", {{"training.epochs", "2"},
                 {"training.steps_per_epoch", "20"},
                 {"logging.progress", "lines"},
                 {"logging.progress_seconds", "0.001"}});
  test::TrainerProcess p({"--config", "eta.yaml"}, dir.path(), test::with_faults("slow_val@3000"));
  ASSERT_EQ(p.wait(), 0) << p.output();
  const std::string out = p.output();
  const std::regex line(
      R"(epoch (\d)/2 step \d+/20 \[[0-9:]+<[0-9:?]+, +[0-9.]+(?:it/s|s/it)\] .* run ETA (\d+):(\d\d))");
  int first = 0, second = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    const int epoch = std::stoi((*it)[1]);
    const int seconds = 60 * std::stoi((*it)[2]) + std::stoi((*it)[3]);
    if (epoch == 1) {
      ++first;
      EXPECT_LT(seconds, 6) << "no validation measured yet: counted 0 s\n" << it->str();
    } else {
      ++second;
      // Epoch 1's validation took >= 6 s (two cases of 3 s); epoch 2 validates too.
      EXPECT_GE(seconds, 6) << it->str();
    }
  }
  EXPECT_GT(first, 0) << out;
  EXPECT_GT(second, 0) << out;
}

}  // namespace
}  // namespace u3d
