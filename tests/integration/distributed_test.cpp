// Data-parallel training over c10d/Gloo with 2 CPU processes: the same numbers as one process with
// the global batch, one run folder, exact resume, c10d::Reducer's gradients, torchrun's launcher and
// srun's variables.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>
#include <cstdlib>

#include "ranks.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/launch_env.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"
#include "u3d/train/distributed.h"
#include "u3d/train/grad_sync.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

// ---------------------------------------------------------------------------------------------
// One backward pass of a small U-Net, reduced two ways in each rank process: GradientSync and
// c10d::Reducer. Runs only as a rank (U3D_DIST_WORKER_OUT set by DataParallel.BucketerEqualsReducer).

constexpr int64_t kSamples = 4;  // the global batch

Network worker_network() {
  ModelConfig m;
  m.levels = 2;
  m.base_filters = 4;
  torch::manual_seed(11);
  return build_network(m, /*in_channels=*/2, /*out_channels=*/1);
}

// The global batch: (kSamples, 2, 8, 8, 8) inputs and (kSamples, 1, 8, 8, 8) targets.
std::pair<torch::Tensor, torch::Tensor> global_batch() {
  torch::manual_seed(12);
  return {torch::randn({kSamples, 2, 8, 8, 8}), torch::randn({kSamples, 1, 8, 8, 8})};
}

// A rank of a worker test: one CPU thread, joined to the Gloo group of the launch's ranks.
struct GlooRank {
  GlooRank() {
    torch::set_num_threads(1);
    t.dist_backend = DistBackend::kGloo;
    t.dist_timeout_s = 60;
    dist = Distributed::join(env, t, torch::kCPU);
  }
  LaunchEnv env = read_launch_env();
  TrainingConfig t;
  std::unique_ptr<Distributed> dist;
};

std::vector<torch::Tensor> grads_of(Network& net) {
  std::vector<torch::Tensor> g;
  for (const auto& p : net->parameters()) g.push_back(p.grad().clone());
  return g;
}

TEST(DistributedWorker, GradientsOfOneStep) {
  const char* out = std::getenv("U3D_DIST_WORKER_OUT");
  if (!out) GTEST_SKIP() << "a rank process of DataParallel.BucketerEqualsReducer";
  const GlooRank worker;
  const auto [x, y] = global_batch();
  const int64_t per_rank = kSamples / worker.env.world_size;
  const torch::Tensor xr = x.narrow(0, worker.env.rank * per_rank, per_rank),
                      yr = y.narrow(0, worker.env.rank * per_rank, per_rank);

  Network a = worker_network();  // ours, with small buckets so there are several
  GradientSync sync(a->parameters(), *worker.dist, /*bucket_bytes=*/4096, /*first_bucket_bytes=*/1024);
  ASSERT_GT(sync.buckets().size(), 2u);
  sync.arm(/*reduce=*/true);
  torch::mse_loss(a->forward(xr), yr).backward();
  sync.finish();

  Network b = worker_network();  // c10d's, with the same buckets
  std::vector<torch::Tensor> params = b->parameters();
  c10d::Reducer reducer(params, sync.buckets(), worker.dist->group(), std::vector<bool>(params.size(), false),
                        /*bucket_bytes_cap=*/4096, /*find_unused_parameters=*/false,
                        /*gradient_as_bucket_view=*/false, /*param_names=*/{}, /*first_bucket_bytes_cap=*/1024,
                        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
                        /*bucket_bytes_cap_list=*/{});
  const torch::Tensor yb = b->forward(xr);
  reducer.prepare_for_backward({yb});
  torch::mse_loss(yb, yr).backward();

  torch::save(grads_of(a), (fs::path(out) / ("ours" + std::to_string(worker.env.rank) + ".pt")).string());
  torch::save(grads_of(b), (fs::path(out) / ("reducer" + std::to_string(worker.env.rank) + ".pt")).string());
  worker.dist->barrier();
}

// Largest |a - b| relative to the largest |b| of each tensor.
double max_relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

std::vector<torch::Tensor> load_tensors(const fs::path& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path.string());
  return t;
}

TEST(DataParallel, BucketerEqualsReducerAndOneProcessWithTheGlobalBatch) {
  test::TempDir dir;
  auto ranks = test::spawn_ranks(2, {"--gtest_filter=DistributedWorker.GradientsOfOneStep"}, dir.path(),
                                 {{"U3D_DIST_WORKER_OUT", dir.path().string()}}, {}, {}, "/proc/self/exe");
  for (int code : test::wait_all(ranks, 120)) ASSERT_EQ(code, 0) << test::outputs(ranks);

  Network one = worker_network();  // one process, the whole global batch
  const auto [x, y] = global_batch();
  torch::mse_loss(one->forward(x), y).backward();
  const auto expected = grads_of(one);

  const auto ours0 = load_tensors(dir / "ours0.pt"), ours1 = load_tensors(dir / "ours1.pt");
  const auto reducer0 = load_tensors(dir / "reducer0.pt"), reducer1 = load_tensors(dir / "reducer1.pt");
  ASSERT_EQ(ours0.size(), expected.size());
  for (size_t i = 0; i < ours0.size(); ++i) {
    EXPECT_TRUE(torch::equal(ours0[i], ours1[i])) << "parameter " << i << ": the ranks' averaged gradients differ";
    EXPECT_TRUE(torch::equal(ours0[i], reducer0[i])) << "parameter " << i << ": ours and c10d::Reducer differ";
    EXPECT_TRUE(torch::equal(reducer0[i], reducer1[i])) << "parameter " << i;
  }
  // Summation order differs from one process: not bitwise, relative 1e-5.
  EXPECT_LT(max_relative_difference(ours0, expected), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Gradients as views into the buckets (DDP's gradient_as_bucket_view): a channels-last network,
// the optimizer zeroing in place and two accumulated micro-batches per step, no copy in or out.
// Runs only as a rank (U3D_DIST_BUCKET_VIEWS_OUT set by DataParallel.GradientsAreViewsIntoTheBuckets...).

// Whether `t`'s memory lies inside `buffer`'s.
bool inside(const torch::Tensor& t, const torch::Tensor& buffer) {
  const auto* begin = static_cast<const char*>(buffer.data_ptr());
  const auto* at = static_cast<const char*>(t.data_ptr());
  return at >= begin && at + t.numel() * t.element_size() <= begin + buffer.numel() * buffer.element_size();
}

TEST(DistributedWorker, GradientsInTheBuckets) {
  const char* out = std::getenv("U3D_DIST_BUCKET_VIEWS_OUT");
  if (!out) GTEST_SKIP() << "a rank process of DataParallel.GradientsAreViewsIntoTheBuckets...";
  const GlooRank worker;
  const auto [x, y] = global_batch();
  const int64_t per_rank = kSamples / worker.env.world_size, micro = per_rank / 2;

  Network net = worker_network();
  to_channels_last(*net);  // before the optimizer, as the trainer
  Optimizer opt(worker.t, net->parameters());
  GradientSync sync(opt.params(), *worker.dist, /*bucket_bytes=*/4096, /*first_bucket_bytes=*/1024);
  ASSERT_GT(sync.buckets().size(), 2u);
  const std::vector<torch::Tensor> buffers = sync.bucket_buffers();
  const std::vector<torch::Tensor>& params = opt.params();
  ASSERT_TRUE(std::any_of(params.begin(), params.end(), [](const torch::Tensor& p) { return !p.is_contiguous(); }))
      << "no channels-last weight to test";
  auto expect_views = [&](const std::string& when) {
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& g = params[i].grad();
      ASSERT_TRUE(g.defined()) << when << ": parameter " << i;
      EXPECT_TRUE(std::any_of(buffers.begin(), buffers.end(), [&](const torch::Tensor& b) { return inside(g, b); }))
          << when << ": parameter " << i << "'s gradient is not in a bucket";
      EXPECT_EQ(g.strides(), params[i].strides()) << when << ": parameter " << i;
    }
  };
  expect_views("before the first step");
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    for (int64_t m = 0; m < 2; ++m) {  // two micro-batches: the mean over the rank's samples
      sync.arm(/*reduce=*/m == 1);
      const int64_t first = worker.env.rank * per_rank + m * micro;
      (torch::mse_loss(net->forward(x.narrow(0, first, micro)), y.narrow(0, first, micro)) / 2.0).backward();
    }
    sync.finish();
    expect_views("after step " + std::to_string(step));
    if (step == 0)
      torch::save(grads_of(net), (fs::path(out) / ("views" + std::to_string(worker.env.rank) + ".pt")).string());
    opt.step(torch::zeros({}));
  }
  // A gradient replaced from outside goes back into its bucket, with its values, at the next arm().
  const torch::Tensor& p0 = params[0];
  p0.mutable_grad() = torch::full_like(p0, 3.0);
  sync.arm(/*reduce=*/false);
  expect_views("after a gradient was replaced");
  EXPECT_TRUE(p0.grad().eq(3.0).all().item<bool>());
  worker.dist->barrier();
}

TEST(DataParallel, GradientsAreViewsIntoTheBucketsAndEqualOneProcessWithTheGlobalBatch) {
  test::TempDir dir;
  auto ranks = test::spawn_ranks(2, {"--gtest_filter=DistributedWorker.GradientsInTheBuckets"}, dir.path(),
                                 {{"U3D_DIST_BUCKET_VIEWS_OUT", dir.path().string()}}, {}, {}, "/proc/self/exe");
  for (int code : test::wait_all(ranks, 120)) ASSERT_EQ(code, 0) << test::outputs(ranks);

  Network one = worker_network();  // one process, the whole global batch, one backward
  to_channels_last(*one);
  const auto [x, y] = global_batch();
  torch::mse_loss(one->forward(x), y).backward();
  const auto expected = grads_of(one);
  const auto views0 = load_tensors(dir / "views0.pt"), views1 = load_tensors(dir / "views1.pt");
  ASSERT_EQ(views0.size(), expected.size());
  for (size_t i = 0; i < views0.size(); ++i) {
    EXPECT_TRUE(torch::equal(views0[i], views1[i])) << "parameter " << i << ": the ranks' averaged gradients differ";
  }
  EXPECT_LT(max_relative_difference(views0, expected), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// The trainer under 2 ranks.

class DataParallelRun : public ::testing::Test {
 protected:
  void SetUp() override { test::make_phantom(dir / "p.h5", Task::kDose, 8, 16); }
  // <name>.yaml (tiny dose config: instance norm, masked L1) and the trainer arguments for it.
  std::vector<std::string> args(const std::string& name, int64_t batch_size, std::vector<std::string> extra = {}) {
    test::write_text(dir / (name + ".yaml"), test::tiny_config("p.h5", name));
    std::vector<std::string> a = {"--config", name + ".yaml",
                                  "--set",    "training.steps_per_epoch=3",
                                  "--set",    "data.batch_size=" + std::to_string(batch_size),
                                  "--set",    "training.dist_timeout_s=60"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
  // Runs `a` and `b` are the same bit for bit: the weights of their last checkpoint and every
  // epoch's train_loss in metrics.csv.
  void expect_same_run(const std::string& a, const std::string& b) const {
    test::expect_same_weights(run(a) / "checkpoints" / "epoch_0002.pt", run(b) / "checkpoints" / "epoch_0002.pt",
                              /*tolerance=*/0);
    const auto ma = test::read_csv(run(a) / "metrics.csv"), mb = test::read_csv(run(b) / "metrics.csv");
    ASSERT_EQ(ma.size(), mb.size());
    for (size_t i = 0; i < ma.size(); ++i) EXPECT_EQ(ma[i].at("train_loss"), mb[i].at("train_loss")) << i;
  }
  test::TempDir dir;
};

TEST_F(DataParallelRun, TwoRanksTrainLikeOneProcessWithTheGlobalBatch) {
  const auto one = test::run_trainer(args("one", /*batch_size=*/4), dir.path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto ranks = test::spawn_ranks(2, args("two", /*batch_size=*/2), dir.path());
  for (int code : test::wait_all(ranks)) ASSERT_EQ(code, 0) << test::outputs(ranks);
  const std::string log = ranks[0]->output();
  EXPECT_NE(log.find("data-parallel: 2 ranks x 2 samples per step = global batch 4"), std::string::npos) << log;
  EXPECT_NE(log.find("2 ranks over gloo (c10d)"), std::string::npos) << log;

  // One run folder: rank 0's metrics.csv, config.yaml and checkpoints; rank 1 wrote nothing.
  const auto a = test::read_csv(run("one") / "metrics.csv");
  const auto b = test::read_csv(run("two") / "metrics.csv");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].at("step"), a[i].at("step"));
    for (const char* col : {"train_loss", "val_loss", "val_mae"}) {
      const double x = std::stod(a[i].at(col)), y = std::stod(b[i].at(col));
      EXPECT_NEAR(y, x, 1e-4 * std::abs(x)) << col << " of epoch " << i + 1;
    }
  }
  EXPECT_TRUE(fs::exists(run("two") / "config.yaml"));
  EXPECT_TRUE(fs::exists(run("two") / "checkpoints" / "epoch_0002.pt"));
  // Parameters after 6 optimizer steps: relative 1e-5 (summation order differs).
  test::expect_same_weights(run("two") / "checkpoints" / "epoch_0002.pt", run("one") / "checkpoints" / "epoch_0002.pt",
                            1e-5);
}

TEST_F(DataParallelRun, TopologyLossesGatherTheirBatchSumsOverTheRanks) {
  // clDice, skeleton recall, the boundary term and class-weighted CE with an ignore label divide
  // sums over the whole batch: 2 ranks x 2 must give one process x 4's values and weights.
  auto r =
      test::run_trainer({"synth", "--task", "surface", "--cases", "8", "--size", "16", "--out", "s.h5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto config = [&](const std::string& name) {
    std::string yaml = test::tiny_config("s.h5", name, Task::kSegmentation);
    yaml.insert(yaml.find("training:\n") + 10,
                "  loss: [{name: ce, weight: 1}, {name: cldice, weight: 0.5}, {name: skeleton_recall, weight: 1},\n"
                "         {name: boundary, weight: 0.1}]\n"
                "  class_weights: [1, 3]\n"
                "  skeleton_iterations: 2\n");
    test::write_text(dir / (name + ".yaml"), yaml);
    // One step per epoch: each epoch's first loss is computed before any update, so a wrong (rank-local)
    // denominator shows at once; more steps only let Adam amplify the summation-order noise of the
    // soft skeletons (after 6 steps: up to 2% in single norm biases on a Xeon VM, 2026-11-28).
    return std::vector<std::string>{"--config", name + ".yaml", "--set", "training.steps_per_epoch=1"};
  };
  auto one_args = config("seg_one");
  one_args.insert(one_args.end(), {"--set", "data.batch_size=4"});
  const auto one = test::run_trainer(one_args, dir.path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two_args = config("seg_two");
  two_args.insert(two_args.end(), {"--set", "data.batch_size=2"});
  auto ranks = test::spawn_ranks(2, two_args, dir.path());
  for (int code : test::wait_all(ranks)) ASSERT_EQ(code, 0) << test::outputs(ranks);
  const auto a = test::read_csv(run("seg_one") / "metrics.csv"), b = test::read_csv(run("seg_two") / "metrics.csv");
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* col : {"train_loss", "loss_ce", "loss_cldice", "loss_skeleton_recall", "loss_boundary"}) {
      const double x = std::stod(a[i].at(col)), y = std::stod(b[i].at(col));
      EXPECT_NEAR(y, x, 1e-4 * std::abs(x) + 1e-7) << col << " of epoch " << i + 1;
    }
  }
  test::expect_same_weights(run("seg_two") / "checkpoints" / "epoch_0002.pt",
                            run("seg_one") / "checkpoints" / "epoch_0002.pt", 1e-5);
}

TEST_F(DataParallelRun, ResumeUnderTwoRanksContinuesExactly) {
  auto straight = test::spawn_ranks(2, args("straight", 2), dir.path());
  for (int code : test::wait_all(straight)) ASSERT_EQ(code, 0) << test::outputs(straight);
  // Rank 1 alone gets SIGTERM as it draws its 4th micro-batch (step 1 of epoch 2): both ranks stop
  // at that step boundary, rank 0 checkpoints, both exit 143.
  auto cut = test::spawn_ranks(2, args("cut", 2), dir.path(), {}, {}, {{}, {{"U3D_TEST_FAULTS", "stop_micro@4"}}});
  const auto codes = test::wait_all(cut);
  EXPECT_EQ(codes, (std::vector<int>{143, 143})) << test::outputs(cut);
  EXPECT_NE(cut[0]->output().find("SIGTERM on another rank"), std::string::npos) << cut[0]->output();
  auto resumed = test::spawn_ranks(2, args("cut", 2, {"--resume"}), dir.path());
  for (int code : test::wait_all(resumed)) ASSERT_EQ(code, 0) << test::outputs(resumed);
  expect_same_run("cut", "straight");
}

TEST_F(DataParallelRun, ResumesUnderAnotherWorldSizeAndSaysTheSampleOrderDiffers) {
  // The checkpoint holds no rank-specific state: 2 ranks stopped in epoch 2 finish as one process,
  // and one process stopped there finishes as 2 ranks; each resume says why its samples differ.
  const std::map<std::string, std::string> stop = {{"U3D_TEST_FAULTS", "stop_micro@4"}};
  auto two = test::spawn_ranks(2, args("shrink", 2), dir.path(), {}, {}, {{}, stop});
  EXPECT_EQ(test::wait_all(two), (std::vector<int>{143, 143})) << test::outputs(two);
  const auto one = test::run_trainer(args("shrink", 2, {"--resume"}), dir.path());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("written by 2 process(es), this run has 1: another global batch"), std::string::npos)
      << one.output;
  EXPECT_EQ(test::read_csv(run("shrink") / "metrics.csv").size(), 2u);

  test::ProcessOptions o;
  o.env = stop;
  test::TrainerProcess single(args("grow", 2), dir.path(), o);
  EXPECT_EQ(single.wait(300), 143) << single.output();
  auto resumed = test::spawn_ranks(2, args("grow", 2, {"--resume"}), dir.path());
  for (int code : test::wait_all(resumed)) ASSERT_EQ(code, 0) << test::outputs(resumed);
  EXPECT_NE(resumed[0]->output().find("written by 1 process(es), this run has 2: another global batch"),
            std::string::npos)
      << resumed[0]->output();
  EXPECT_EQ(test::read_csv(run("grow") / "metrics.csv").size(), 2u);
  EXPECT_TRUE(fs::exists(run("grow") / "checkpoints" / "epoch_0002.pt"));
}

TEST_F(DataParallelRun, UnderSrunsVariablesTwoRanksMatchTheTorchrunOnes) {
  // `srun --ntasks=2 trainer ...` on one node, by the variables srun sets (no Slurm here): rank 0
  // hosts the store on the node list's first host at the port derived from SLURM_JOB_ID, and the
  // run is bit for bit the one under torchrun's variables.
  auto srun = test::spawn_srun_ranks(2, args("srun", 2), dir.path());
  if (srun.empty()) GTEST_SKIP() << "no free TCP port in 20000..39999 for the derived store port";
  for (int code : test::wait_all(srun)) ASSERT_EQ(code, 0) << test::outputs(srun);
  EXPECT_NE(srun[0]->output().find("store localhost:"), std::string::npos) << srun[0]->output();
  EXPECT_NE(srun[0]->output().find("this is rank 0 of 2 (local rank 0, slurm)"), std::string::npos)
      << srun[0]->output();
  auto spawned = test::spawn_ranks(2, args("spawned", 2), dir.path());
  for (int code : test::wait_all(spawned)) ASSERT_EQ(code, 0) << test::outputs(spawned);
  expect_same_run("srun", "spawned");
}

TEST_F(DataParallelRun, TwoTorchrunNodesOfOneRankEachMatchTheSpawnedRanks) {
  // torchrun --nnodes=2 --nproc-per-node=1 with the c10d rendezvous, both agents on this machine:
  // ranks 0 and 1 are each local rank 0 of their node; the numbers are the one-node run's.
  auto nodes = test::torchrun_nodes(2, args("nodes", 2), dir.path());
  if (nodes.empty()) GTEST_SKIP() << "no torch venv Python (U3D_TORCH_PYTHON) for torch.distributed.run";
  for (int code : test::wait_all(nodes)) ASSERT_EQ(code, 0) << test::outputs(nodes);
  const std::string log = test::outputs(nodes);  // rank 1 logs warnings only
  EXPECT_NE(log.find("2 ranks over gloo (c10d)"), std::string::npos) << log;
  EXPECT_NE(log.find("this is rank 0 of 2 (local rank 0, torchrun)"), std::string::npos) << log;
  auto spawned = test::spawn_ranks(2, args("spawned", 2), dir.path());
  for (int code : test::wait_all(spawned)) ASSERT_EQ(code, 0) << test::outputs(spawned);
  expect_same_run("nodes", "spawned");
}

TEST_F(DataParallelRun, ThroughTorchrunTwoRanksMatchTheSpawnedOnesAndOneRankThePlainRun) {
  if (!test::torch_python()) GTEST_SKIP() << "no torch venv Python (U3D_TORCH_PYTHON) for torch.distributed.run";
  auto spawned = test::spawn_ranks(2, args("spawned", 2), dir.path());
  for (int code : test::wait_all(spawned)) ASSERT_EQ(code, 0) << test::outputs(spawned);
  auto two = test::torchrun(2, args("torchrun2", 2), dir.path());
  ASSERT_EQ(two->wait(300), 0) << two->output();
  expect_same_run("torchrun2", "spawned");

  // World size 1 under torchrun: bit for bit the plain run.
  const auto plain = test::run_trainer(args("plain", 2), dir.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  auto single = test::torchrun(1, args("torchrun1", 2), dir.path());
  ASSERT_EQ(single->wait(300), 0) << single->output();
  EXPECT_NE(single->output().find("1 ranks over gloo"), std::string::npos) << single->output();
  expect_same_run("torchrun1", "plain");
}

}  // namespace
}  // namespace u3d
