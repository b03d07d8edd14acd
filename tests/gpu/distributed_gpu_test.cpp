// Data-parallel training on CUDA over NCCL with the GPUs this machine has (one lent GPU: world
// size 1, which still runs every NCCL path: the group, the broadcast, the bucketed all-reduce from
// the autograd hooks, the Gloo control group). Each test checks the log for NCCL, so none passes by
// falling back to Gloo or to a plain run. Skipped without CUDA.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "ranks.h"
#include "test_support.h"
#include "u3d/model/unet.h"
#include "u3d/train/checkpoint.h"

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

TEST(DataParallelCuda, NcclRanksTrainLikeThePlainRun) {
  U3D_REQUIRE_CUDA();
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kDose, 8, 16);
  const int world = static_cast<int>(std::min<int64_t>(2, static_cast<int64_t>(torch::cuda::device_count())));
  for (const char* name : {"plain", "nccl"})
    test::write_text(dir / (std::string(name) + ".yaml"), test::tiny_config("p.h5", name));
  // One process with the global batch, then `world` NCCL ranks with batch 2 each.
  auto plain_args = cuda_args("plain");
  plain_args.insert(plain_args.end(), {"--set", "data.batch_size=" + std::to_string(2 * world)});
  const auto plain = test::run_trainer(plain_args, dir.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto ranks = test::spawn_ranks(world, cuda_args("nccl"), dir.path());
  for (int code : test::wait_all(ranks)) ASSERT_EQ(code, 0) << test::outputs(ranks);
  const std::string log = ranks[0]->output();
  EXPECT_NE(log.find(std::to_string(world) + " ranks over nccl (c10d)"), std::string::npos) << log;
  EXPECT_NE(log.find("CUDA graph off: data-parallel steps are eager"), std::string::npos) << log;

  auto weights = [](const fs::path& path) { return test::load_network(path)->parameters(); };
  const auto a = weights(dir / "runs" / "nccl" / "checkpoints" / "epoch_0002.pt");
  const auto b = weights(dir / "runs" / "plain" / "checkpoints" / "epoch_0002.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (world == 1) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << ": world size 1 must equal the plain run";
    } else {
      const double scale = std::max(b[i].abs().max().item<double>(), 1e-12);
      EXPECT_LT((a[i] - b[i]).abs().max().item<double>() / scale, 1e-4) << "parameter " << i;
    }
  }
}

}  // namespace
}  // namespace u3d
