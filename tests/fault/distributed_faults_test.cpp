// Data-parallel failures with 2 real rank processes over Gloo: a rank killed with SIGKILL, ranks
// that disagree on the config, torchrun restarting killed workers, torchrun's error file.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "fault_support.h"
#include "ranks.h"

namespace u3d::test {
namespace {

using Clock = std::chrono::steady_clock;

class DataParallelFaults : public PhantomRunTest {
 protected:
  // A dose run of `epochs` x `steps` (rank-local batch 2), long enough to be killed in the middle.
  std::vector<std::string> args(const std::string& name, int64_t epochs = 3, int64_t steps = 40) {
    config(name, {{"training.epochs", std::to_string(epochs)},
                  {"data.batch_size", "2"},
                  {"training.steps_per_epoch", std::to_string(steps)},
                  {"training.dist_timeout_s", "30"}});
    return {"--config", name + ".yaml"};
  }
};

TEST_F(DataParallelFaults, AKilledRankMakesTheOtherExitNamingIt) {
  auto ranks = test::spawn_ranks(2, args("killed", /*epochs=*/1, /*steps=*/1000000), dir.path());
  // Training has started once rank 0 wrote its first steps (train.log's step lines come with the
  // banner; wait for the data-parallel line and a little more).
  ASSERT_TRUE(ranks[0]->wait_until([&] { return ranks[0]->output().find("data-parallel:") != std::string::npos; }, 120))
      << test::outputs(ranks);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ranks[1]->signal(SIGKILL);
  const auto t0 = Clock::now();
  const int code = ranks[0]->wait(120);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(code, 1) << ranks[0]->output();
  EXPECT_LT(seconds, 30 + 15) << "rank 0 must give up within training.dist_timeout_s";
  const std::string out = ranks[0]->output();
  EXPECT_NE(out.find("rank 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 crashed, was killed or hung"), std::string::npos) << out;
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;  // one line, no abort
}

TEST_F(DataParallelFaults, RanksWithDifferentConfigsStopWithOneLineEach) {
  const fs::path error_file = dir / "error.json";
  auto ranks = test::spawn_ranks(2, args("differ"), dir.path(), {{"TORCHELASTIC_ERROR_FILE", error_file.string()}},
                                 {{}, {"--set", "training.lr=0.01"}});
  EXPECT_EQ(test::wait_all(ranks, 120), (std::vector<int>{2, 2})) << test::outputs(ranks);
  for (auto& r : ranks) {
    EXPECT_NE(r->output().find("the resolved config differs between ranks: rank 1 differs from rank 0's"),
              std::string::npos)
        << r->output();
  }
  EXPECT_FALSE(fs::exists(dir / "runs" / "differ" / "checkpoints" / "epoch_0001.pt"));
  // torchrun's error file: the agent's failure summary shows this line.
  const std::string json = test::read_text(error_file);
  EXPECT_NE(json.find(R"({"message": {"message": ")"), std::string::npos) << json;
  EXPECT_NE(json.find("differs between ranks"), std::string::npos) << json;
}

TEST_F(DataParallelFaults, TorchrunRestartsKilledWorkersFromTheNewestCheckpoint) {
  if (!test::torch_python()) GTEST_SKIP() << "no torch venv Python (U3D_TORCH_PYTHON) for torch.distributed.run";
  const auto a = args("restarted", /*epochs=*/3, /*steps=*/400);
  auto job = test::torchrun(2, a, dir.path(), {"--max-restarts=1", "--monitor-interval=0.2"});
  const fs::path first = dir / "runs" / "restarted" / "checkpoints" / "epoch_0001.pt";
  ASSERT_TRUE(job->wait_until([&] { return fs::exists(first); }, 240)) << job->output();
  const auto workers = test::trainer_pids_with("restarted.yaml");
  ASSERT_EQ(workers.size(), 2u) << job->output();
  ::kill(workers[1], SIGKILL);
  ASSERT_EQ(job->wait(400), 0) << job->output();
  const std::string out = job->output();
  EXPECT_NE(out.find("torchrun restart 1: resuming from the newest checkpoint"), std::string::npos) << out;
  const auto rows = test::read_csv(dir / "runs" / "restarted" / "metrics.csv");
  ASSERT_EQ(rows.size(), 3u) << out;
  EXPECT_EQ(rows.back().at("epoch"), "3");
}

}  // namespace
}  // namespace u3d::test
