// Data-parallel training on CUDA over NCCL with the GPUs this machine has (one lent GPU: world
// size 1, which still runs every NCCL path: the group, the broadcast, the bucketed all-reduce from
// the autograd hooks, the Gloo control group). Each test checks the log for NCCL, so none passes by
// falling back to Gloo or to a plain run. Skipped without CUDA.
#include <ATen/cuda/Sleep.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "fixtures.h"
#include "ranks.h"
#include "test_support.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"
#include "u3d/train/distributed.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

std::vector<std::string> cuda_args(const std::string& name) {
  return {"--config", name + ".yaml",
          "--set",    "training.device=cuda",
          "--set",    "training.steps_per_epoch=3",
          "--set",    "training.dist_timeout_s=120"};
}

// The weights of run `a` after epoch 2 against run `b`'s: bitwise with one rank (its all-reduce is
// a copy), else within `tolerance` relative to b's largest value per tensor.
void expect_same_weights(const fs::path& dir, const std::string& a_run, const std::string& b_run, int world,
                         double tolerance) {
  const auto checkpoint = [&](const std::string& run) { return dir / "runs" / run / "checkpoints" / "epoch_0002.pt"; };
  test::expect_same_weights(checkpoint(a_run), checkpoint(b_run), world == 1 ? 0 : tolerance);
}

// Two ranks, or one where the machine has one GPU.
int ranks_on_this_machine() {
  return static_cast<int>(std::min<int64_t>(2, static_cast<int64_t>(torch::cuda::device_count())));
}

TEST(DataParallelCuda, NcclRanksTrainLikeThePlainRun) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  test::phantom_with_configs(dir, 8, 16, {"plain", "nccl"});
  const int world = ranks_on_this_machine();
  // One process with the global batch, then `world` NCCL ranks with batch 2 each.
  auto plain_args = cuda_args("plain");
  plain_args.insert(plain_args.end(), {"--set", "data.batch_size=" + std::to_string(2 * world)});
  const auto plain = test::run_trainer(plain_args, dir.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto ranks = test::spawn_ranks(world, cuda_args("nccl"), dir.path());
  for (int code : test::wait_all(ranks)) ASSERT_EQ(code, 0) << test::outputs(ranks);
  const std::string log = ranks[0]->output();
  EXPECT_NE(log.find(std::to_string(world) + " ranks over nccl (c10d)"), std::string::npos) << log;
  EXPECT_NE(log.find("CUDA graph off: data-parallel steps are eager under training.cuda_graph: auto"),
            std::string::npos)
      << log;

  expect_same_weights(dir.path(), "nccl", "plain", world, /*tolerance=*/1e-4);
}

// training.cuda_graph: on under data-parallel training: every rank captures the whole step with its
// NCCL all-reduces, and the replays train as the eager steps do (deterministic fp32: bitwise with
// one rank, whose all-reduce is a copy; to rounding with two).
TEST(DataParallelCuda, CapturedNcclStepsTrainLikeEagerOnes) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  test::phantom_with_configs(dir, 8, 16, {"eager", "graph"});
  const int world = ranks_on_this_machine();
  auto args = [](const std::string& name, const std::string& graph) {
    auto a = cuda_args(name);
    a.insert(a.end(), {"--set", "training.cuda_graph=" + graph, "--set", "training.graph_warmup_steps=2", "--set",
                       "training.deterministic=true", "--set", "training.precision=fp32"});
    return a;
  };
  auto eager = test::spawn_ranks(world, args("eager", "auto"), dir.path());
  for (int code : test::wait_all(eager)) ASSERT_EQ(code, 0) << test::outputs(eager);
  auto graph = test::spawn_ranks(world, args("graph", "on"), dir.path());
  for (int code : test::wait_all(graph)) ASSERT_EQ(code, 0) << test::outputs(graph);
  for (const auto& rank : graph) {
    const std::string log = rank->output();
    EXPECT_NE(log.find(std::to_string(world) + " ranks over nccl (c10d)"), std::string::npos) << log;
    EXPECT_NE(log.find("every rank captures the same step"), std::string::npos) << log;
    EXPECT_NE(log.find("captured in a CUDA graph after 2 warm-up steps"), std::string::npos) << log;
  }
  EXPECT_NE(eager[0]->output().find("data-parallel steps are eager"), std::string::npos) << eager[0]->output();

  expect_same_weights(dir.path(), "graph", "eager", world, /*tolerance=*/1e-5);
}

// Gloo's collectives run on the host: a graph cannot hold them, so `on` is a one-line config error.
TEST(DataParallelCuda, GraphOnWithGlooIsAOneLineConfigError) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 4, 16);
  test::write_text(dir / "gloo.yaml", test::tiny_config("p.h5", "gloo"));
  auto a = cuda_args("gloo");
  a.insert(a.end(), {"--set", "training.dist_backend=gloo", "--set", "training.cuda_graph=on"});
  auto ranks = test::spawn_ranks(1, a, dir.path());
  const auto codes = test::wait_all(ranks);
  EXPECT_EQ(codes[0], 2) << test::outputs(ranks);
  EXPECT_NE(ranks[0]->output().find("training.cuda_graph: on with data-parallel training needs training.dist_backend "
                                    "nccl, and this run uses gloo"),
            std::string::npos)
      << ranks[0]->output();
  EXPECT_FALSE(fs::exists(dir / "runs" / "gloo" / "checkpoints" / "epoch_0001.pt"));
}

// The bounded host wait that replaces the NCCL watchdog for replayed graphs: device work longer
// than training.dist_timeout_s is a DistributedError, finished work returns at once.
TEST(DataParallelCuda, WaitForDeviceGivesUpAfterTheTimeout) {
  U3D_REQUIRE_CUDA();
  LaunchEnv env;
  env.launched = true;
  env.launcher = "torchrun";
  env.store_port = test::free_tcp_port();
  TrainingConfig t;
  t.dist_backend = DistBackend::kNccl;
  t.dist_timeout_s = 1;
  auto dist = Distributed::join(env, t, torch::Device(torch::kCUDA, 0));
  ASSERT_EQ(dist->backend_name(), "nccl");
  torch::cuda::synchronize();
  dist->wait_for_device("an idle device");           // nothing queued: returns
  at::cuda::sleep(int64_t{6} * 1000 * 1000 * 1000);  // about 3 s at 2 GHz, on the current stream
  try {
    dist->wait_for_device("the test's sleeping kernel");
    ADD_FAILURE() << "wait_for_device returned while a kernel of about 3 s ran";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("the device had not run the queued steps after 1 s"), std::string::npos)
        << e.what();
  }
  torch::cuda::synchronize();
}

}  // namespace
}  // namespace u3d
