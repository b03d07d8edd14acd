// Data-parallel failures with 2 real rank processes over Gloo: a rank killed with SIGKILL, ranks
// that disagree on the config, torchrun restarting killed workers, torchrun's error file; and the
// start-up's failures (a store nobody hosts, a port held by a program that is not a store, ranks
// started with different world sizes or twice as one rank, a rank that never started), each one
// line of ours within training.dist_timeout_s.
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
  // A short run whose ranks wait at most `timeout_s` for each other at start-up.
  std::vector<std::string> start_args(const std::string& name, int timeout_s) {
    config(name, {{"training.epochs", "1"},
                  {"data.batch_size", "2"},
                  {"training.steps_per_epoch", "2"},
                  {"training.dist_timeout_s", std::to_string(timeout_s)}});
    return {"--config", name + ".yaml"};
  }
};

constexpr int kStartTimeout = 5;    // training.dist_timeout_s of the start-up tests
constexpr double kStartSlack = 25;  // a trainer's own start on a loaded 2-core machine
using Ranks = std::vector<std::unique_ptr<TrainerProcess>>;

// Every rank exits with `code` before training.dist_timeout_s (plus the start's slack) with one
// line of ours holding `expected`: no c10d text, no C++ stack trace, no abort.
void expect_start_failure(Ranks& ranks, const std::vector<int>& which, int code, const std::string& expected,
                          const Clock::time_point& started) {
  for (int r : which) {
    auto& rank = *ranks[static_cast<size_t>(r)];
    EXPECT_EQ(rank.wait(kStartTimeout + kStartSlack + 30), code) << rank.output();
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    EXPECT_LT(seconds, kStartTimeout + kStartSlack) << "must give up within training.dist_timeout_s\n" << rank.output();
    const std::string out = rank.output();
    EXPECT_NE(out.find(expected), std::string::npos) << out;
    for (const char* library :
         {"[c10d]", "frame #", "Exception raised from", "terminate called", "TCPStore", "Socket", "gloo", "Gloo"}) {
      EXPECT_EQ(out.find(library), std::string::npos) << library << " in\n" << out;
    }
  }
}

TEST_F(DataParallelFaults, ARankThatCannotReachTheStoreSaysSoInOneLine) {
  // Rank 0, which hosts the store, never started: nothing listens at MASTER_PORT.
  const int port = free_tcp_port();
  const auto started = Clock::now();
  auto ranks = test::spawn_some_ranks(2, {1}, port, start_args("unreachable", kStartTimeout), dir.path());
  expect_start_failure(ranks, {0}, 1,
                       "rank 1 of 2 (local rank 1, torchrun): cannot reach the rendezvous store at 127.0.0.1:" +
                           std::to_string(port) + " (MASTER_ADDR:MASTER_PORT) within training.dist_timeout_s 5 s",
                       started);
}

TEST_F(DataParallelFaults, AStoreHostThatDoesNotResolveIsNamedAtOnce) {
  const auto started = Clock::now();
  auto ranks = test::spawn_some_ranks(2, {1}, free_tcp_port(), start_args("nohost", kStartTimeout), dir.path(),
                                      {{{"MASTER_ADDR", "nosuchhost.invalid"}}});
  expect_start_failure(ranks, {0}, 2,
                       "the rendezvous store's host 'nosuchhost.invalid' (MASTER_ADDR:MASTER_PORT) does not resolve to "
                       "an address",
                       started);
}

TEST_F(DataParallelFaults, AStorePortHeldByAnotherProgramFailsWithinTheTimeoutSayingSo) {
  const SilentListener other;  // holds MASTER_PORT, accepts connections, never answers
  ASSERT_GT(other.port(), 0);
  const auto started = Clock::now();
  auto ranks = test::spawn_some_ranks(2, {0, 1}, other.port(), start_args("held", kStartTimeout), dir.path());
  const std::string where = "127.0.0.1:" + std::to_string(other.port());
  // Rank 0 cannot host the store there; rank 1 reaches the program, which never answers as a store.
  expect_start_failure(ranks, {0}, 1,
                       "cannot host the job's rendezvous store at port " + std::to_string(other.port()) + " (" + where +
                           "): another program, which is not a rendezvous store, holds that port",
                       started);
  expect_start_failure(ranks, {1}, 1,
                       where +
                           " (MASTER_ADDR:MASTER_PORT) is not a rendezvous store: a program there accepted the "
                           "connection but did not answer as one within training.dist_timeout_s 5 s",
                       started);
}

TEST_F(DataParallelFaults, RanksStartedWithDifferentWorldSizesSaySoOnEveryRank) {
  const auto started = Clock::now();
  auto ranks = test::spawn_ranks(2, start_args("sizes", 30), dir.path(), {}, {},
                                 {{}, {{"WORLD_SIZE", "3"}, {"LOCAL_WORLD_SIZE", "3"}}});
  expect_start_failure(ranks, {0, 1}, 2,
                       "were started with different world sizes: rank 0 with WORLD_SIZE=2, rank 1 with WORLD_SIZE=3; "
                       "start every rank with the same WORLD_SIZE",
                       started);
}

TEST_F(DataParallelFaults, ARankThatNeverStartedIsNamedWithinTheTimeout) {
  const auto started = Clock::now();
  auto ranks = test::spawn_some_ranks(3, {0, 1}, free_tcp_port(), start_args("alone", kStartTimeout), dir.path());
  for (const std::string who : {"rank 0 of 3", "rank 1 of 3"}) {
    const size_t r = who == "rank 0 of 3" ? 0 : 1;
    expect_start_failure(ranks, {static_cast<int>(r)}, 1,
                         who + " (local rank " + std::to_string(r) +
                             ", torchrun): rank 2 never joined the job at the rendezvous store 127.0.0.1:",
                         started);
  }
  EXPECT_FALSE(fs::exists(run("alone") / "checkpoints")) << "nothing of a run that never started";
}

TEST_F(DataParallelFaults, TwoProcessesStartedAsOneRankSaySo) {
  const int port = free_tcp_port();
  const auto started = Clock::now();
  // Ranks 0 and 1 of 3, and a second rank 1 instead of rank 2.
  auto ranks = test::spawn_some_ranks(3, {0, 1, 1}, port, start_args("twice", kStartTimeout), dir.path());
  expect_start_failure(ranks, {0, 1, 2}, 2,
                       "two processes were started as rank 1 (RANK=1) of the job at 127.0.0.1:" + std::to_string(port),
                       started);
}

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
  for (const char* library :
       {"pair.cc", "third_party", "Connection reset", "Connection closed", "[c10d]"}) {  // no backend text
    EXPECT_EQ(out.find(library), std::string::npos) << library << " in\n" << out;
  }
}

TEST_F(DataParallelFaults, AGlooInterfaceThatDoesNotExistIsNamed) {
  const auto started = Clock::now();
  auto ranks = test::spawn_ranks(2, start_args("iface", kStartTimeout), dir.path(), {}, {},
                                 {{}, {{"GLOO_SOCKET_IFNAME", "nosuchif0"}}});
  expect_start_failure(ranks, {1}, 2, "environment: GLOO_SOCKET_IFNAME='nosuchif0': no such network interface",
                       started);
  expect_start_failure(ranks, {0}, 1, "rank 0 of 2 (local rank 0, torchrun): rank 1 never joined the job", started);
}

TEST_F(DataParallelFaults, AWorldSizeWithoutARankIsNotAPlainRunThatTrainsAlone) {
  start_args("half", kStartTimeout);
  for (const auto& [set, expected] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"WORLD_SIZE", "2"}}, "environment: WORLD_SIZE=2 is set but RANK is not"},
           {{{"RANK", "1"}}, "environment: RANK=1 is set but WORLD_SIZE is not"}}) {
    ProcessOptions o;
    o.env = set;
    for (const char* unset : {"RANK", "WORLD_SIZE", "SLURM_STEP_ID"}) {
      if (!set.count(unset)) o.env[unset] = "";  // empty reads as unset
    }
    o.log = dir / ("half-" + set.begin()->first + ".out");
    TrainerProcess p({"--config", "half.yaml"}, dir.path(), o);
    EXPECT_EQ(p.wait(60), 2) << p.output();
    EXPECT_NE(p.output().find(expected), std::string::npos) << p.output();
  }
  EXPECT_FALSE(fs::exists(run("half") / "checkpoints")) << "no run of one process";
}

TEST_F(DataParallelFaults, AStoppedRankZeroThatHostsTheStoreIsNamedWithinTheTimeout) {
  // Rank 0 hangs (SIGSTOP) while it hosts the store: rank 1's all-reduce times out, and asking the
  // store which ranks are alive must not wait for ever on the stopped host either.
  config("stopped", {{"training.epochs", "1"},
                     {"data.batch_size", "2"},
                     {"training.steps_per_epoch", "1000000"},
                     {"training.dist_timeout_s", std::to_string(kStartTimeout)}});
  auto ranks = test::spawn_ranks(2, {"--config", "stopped.yaml"}, dir.path());
  ASSERT_TRUE(ranks[0]->wait_until([&] { return ranks[0]->output().find("data-parallel:") != std::string::npos; }, 120))
      << test::outputs(ranks);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ranks[0]->signal(SIGSTOP);
  const auto stopped = Clock::now();
  const int code = ranks[1]->wait(kStartTimeout + 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped).count();
  ranks[0]->signal(SIGKILL);
  ranks[0]->signal(SIGCONT);
  EXPECT_EQ(code, 1) << ranks[1]->output();
  EXPECT_LT(seconds, kStartTimeout + 20) << "rank 1 must give up within training.dist_timeout_s and a few seconds";
  const std::string out = ranks[1]->output();
  EXPECT_NE(out.find("rank 1 of 2 (local rank 1, torchrun): "), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 hosts it"), std::string::npos) << out;
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
