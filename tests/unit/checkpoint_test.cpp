#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/checkpoint.h"
#include "u3d/errors.h"
#include "u3d/optimizer.h"

namespace u3d {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.levels = 2;
  m.base_filters = 4;
  m.norm = Norm::kBatch;  // has running-stat buffers, which must round-trip too
  return m;
}

TEST(Checkpoint, SaveThenLoadGivesIdenticalOutputsAndState) {
  test::TempDir dir;
  torch::manual_seed(1);
  auto net = build_network(tiny_model(), 2, 1);
  TrainingConfig tc;
  auto opt = make_optimizer(tc, net->parameters());
  const auto x = torch::randn({2, 2, 8, 8, 8});
  for (int i = 0; i < 3; ++i) {  // move weights, BN statistics and Adam moments off their initial values
    opt->zero_grad();
    net->forward(x).square().mean().backward();
    opt->step();
  }
  CheckpointInfo info;
  info.state.epoch = 3;
  info.state.global_step = 30;
  info.state.best_metric = 1.25;
  info.config_yaml = "data: {path: x.h5}\n";
  info.task = "dose";
  info.in_channels = 2;
  info.out_channels = 1;
  save_checkpoint(dir / "c.pt", info, *net, opt.get());

  torch::manual_seed(99);
  auto other = build_network(tiny_model(), 2, 1);
  auto other_opt = make_optimizer(tc, other->parameters());
  const auto back = load_checkpoint(dir / "c.pt", *other, other_opt.get(), torch::kCPU, true);
  net->eval();
  other->eval();
  EXPECT_TRUE(torch::equal(net->forward(x), other->forward(x)));
  EXPECT_EQ(back.state.epoch, 3);
  EXPECT_EQ(back.state.global_step, 30);
  EXPECT_DOUBLE_EQ(back.state.best_metric, 1.25);
  EXPECT_EQ(back.config_yaml, info.config_yaml);
  EXPECT_FALSE(back.version.empty());
  EXPECT_FALSE(back.commit.empty());
  // The next optimizer step is the same for both: the Adam moments and step count came back.
  net->train();
  other->train();
  opt->zero_grad();
  net->forward(x).square().mean().backward();
  opt->step();
  other_opt->zero_grad();
  other->forward(x).square().mean().backward();
  other_opt->step();
  const auto pa = net->parameters();
  const auto pb = other->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
}

TEST(Checkpoint, CorruptFileIsAReadableError) {
  test::TempDir dir;
  test::write_text(dir / "bad.pt", "garbage");
  auto net = build_network(tiny_model(), 2, 1);
  EXPECT_THROW(load_checkpoint(dir / "bad.pt", *net, nullptr, torch::kCPU, false), CheckpointError);
  try {
    read_checkpoint_info(dir / "missing.pt");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(CheckpointStore, OrdersPrunesAndResolves) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  EXPECT_THROW(store.resolve("last"), CheckpointError);
  for (int e : {1, 2, 10, 3}) test::write_text(store.periodic_path(e), "x");
  test::write_text(dir / "epoch_0003_step_000050.pt", "x");
  const auto all = store.periodic();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[2].filename(), "epoch_0003_step_000050.pt");
  EXPECT_EQ(all.back().filename(), "epoch_0010.pt");
  EXPECT_EQ(store.resolve("last").filename(), "epoch_0010.pt");
  EXPECT_EQ(store.resolve("best").filename(), "epoch_0010.pt");  // no best.pt yet
  test::write_text(store.best_path(), "x");
  EXPECT_EQ(store.resolve("best"), store.best_path());
  store.prune();
  const auto kept = store.periodic();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].filename(), "epoch_0003.pt");
  EXPECT_TRUE(fs::exists(store.best_path()));
}

}  // namespace
}  // namespace u3d
