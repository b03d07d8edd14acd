#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"
#include "u3d/train/checkpoint_keeper.h"
#include "u3d/train/optimizer.h"

#include <unistd.h>

#include <thread>

namespace u3d {
namespace {

ModelConfig tiny_model() {
  ModelConfig m = test::unet_config(2);
  m.norm = Norm::kBatch;  // has running-stat buffers, which must round-trip too
  return m;
}

TEST(Checkpoint, SaveThenLoadGivesIdenticalOutputsAndState) {
  test::TempDir dir;
  torch::manual_seed(1);
  auto net = build_network(tiny_model(), 2, 1);
  TrainingConfig tc;
  auto opt = std::make_unique<Optimizer>(tc, net->parameters());
  const auto x = torch::randn({2, 2, 8, 8, 8});
  const auto no_inf = torch::zeros({}, torch::kFloat);
  for (int i = 0; i < 3; ++i) {  // move weights, BN statistics and Adam moments off their initial values
    opt->zero_grad();
    net->forward(x).square().mean().backward();
    opt->step(no_inf);
  }
  CheckpointInfo info;
  info.state.epoch = 3;
  info.state.global_step = 30;
  info.state.best_metric = 1.25;
  info.state.step_in_epoch = 4;
  info.state.epoch_loss_sum = 0.123456789012345;
  info.state.skipped_in_a_row = 2;
  info.sampler.seed = 7;
  info.sampler.next_sample = 8;
  info.sampler.cases_sha256 = "abc";
  info.config_yaml = "data: {path: x.h5}\n";
  info.task = "dose";
  info.in_channels = 2;
  info.out_channels = 1;
  save_checkpoint(dir / "c.pt", info, *net, opt.get());

  torch::manual_seed(99);
  auto other = build_network(tiny_model(), 2, 1);
  auto other_opt = std::make_unique<Optimizer>(tc, other->parameters());
  const auto back = load_checkpoint(dir / "c.pt", *other, other_opt.get(), torch::kCPU, true);
  net->eval();
  other->eval();
  EXPECT_TRUE(torch::equal(net->forward(x), other->forward(x)));
  EXPECT_EQ(back.state.epoch, 3);
  EXPECT_EQ(back.state.global_step, 30);
  EXPECT_DOUBLE_EQ(back.state.best_metric, 1.25);
  EXPECT_EQ(back.state.step_in_epoch, 4);
  EXPECT_EQ(back.state.epoch_loss_sum, 0.123456789012345);  // bit for bit
  EXPECT_EQ(back.state.skipped_in_a_row, 2);
  EXPECT_EQ(back.sampler.seed, 7);
  EXPECT_EQ(back.sampler.next_sample, 8);
  EXPECT_EQ(back.sampler.cases_sha256, "abc");
  EXPECT_EQ(other_opt->steps_applied(), 3);
  EXPECT_EQ(back.config_yaml, info.config_yaml);
  EXPECT_FALSE(back.version.empty());
  EXPECT_FALSE(back.commit.empty());
  // The next optimizer step is the same for both: the Adam moments and step count came back.
  net->train();
  other->train();
  opt->zero_grad();
  net->forward(x).square().mean().backward();
  opt->step(no_inf);
  other_opt->zero_grad();
  other->forward(x).square().mean().backward();
  other_opt->step(no_inf);
  const auto pa = net->parameters();
  const auto pb = other->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << i;
}

TEST(Checkpoint, CorruptFileIsAReadableError) {
  test::TempDir dir;
  test::write_text(dir / "bad.pt", "garbage");
  auto net = build_network(tiny_model(), 2, 1);
  // One line naming the file, without LibTorch's zip-reader text (issue 35).
  const std::string what =
      test::error_of<CheckpointError>([&] { load_checkpoint(dir / "bad.pt", *net, nullptr, torch::kCPU, false); });
  EXPECT_NE(what.find("bad.pt: cannot read checkpoint: the file is truncated or corrupt (7 bytes"), std::string::npos)
      << what;
  EXPECT_EQ(what.find("PytorchStreamReader"), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  try {
    read_checkpoint_info(dir / "missing.pt");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.exit_code(), 2);
  }
}

// A real checkpoint of a tiny model at `path` (through the manifest protocol).
void write_checkpoint(const fs::path& path, int64_t epoch) {
  torch::manual_seed(static_cast<uint64_t>(epoch));
  auto net = build_network(tiny_model(), 2, 1);
  CheckpointInfo info;
  info.state.epoch = epoch;
  info.config_yaml = "data: {path: x.h5}\n";
  save_checkpoint(path, info, *net, nullptr);
}

void flip_byte(const fs::path& path, int64_t offset_from_end) {
  std::string bytes = test::read_text(path);
  bytes[bytes.size() - static_cast<size_t>(offset_from_end)] ^= 0x5A;
  test::write_text(path, bytes);
}

TEST(CheckpointStore, OrdersPeriodicAndStepCheckpoints) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  EXPECT_THROW(store.resolve("last"), CheckpointError);
  for (int e : {1, 2, 10, 3}) test::write_text(store.periodic_path(e), "x");
  test::write_text(store.step_path(3, 50), "x");
  const auto all = store.periodic();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[2].filename(), "epoch_0003_step_000050.pt");
  EXPECT_EQ(all[3].filename(), "epoch_0003.pt");
  EXPECT_EQ(all.back().filename(), "epoch_0010.pt");
}

TEST(CheckpointStore, ManifestListsEveryCommittedCheckpointAndResolves) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  for (int e : {1, 2, 3}) write_checkpoint(store.periodic_path(e), e);
  write_checkpoint(store.best_path(), 2);
  const std::string manifest = test::read_text(store.manifest_path());
  for (const char* name : {"epoch_0001.pt", "epoch_0002.pt", "epoch_0003.pt", "best.pt"}) {
    EXPECT_TRUE(store.verify(dir / name).verified()) << name;
    EXPECT_NE(manifest.find(std::string("  ") + name + "\n"), std::string::npos) << manifest;
  }
  EXPECT_EQ(std::count(manifest.begin(), manifest.end(), '\n'), 4) << manifest;  // one line per file
  EXPECT_EQ(store.resolve("last").filename(), "epoch_0003.pt");
  EXPECT_EQ(store.resolve("best").filename(), "best.pt");
  // Rewriting a file replaces its entry.
  write_checkpoint(store.periodic_path(3), 33);
  EXPECT_TRUE(store.verify(store.periodic_path(3)).verified());
  const std::string rewritten = test::read_text(store.manifest_path());
  EXPECT_EQ(std::count(rewritten.begin(), rewritten.end(), '\n'), 4) << rewritten;
  EXPECT_NE(rewritten, manifest);
  EXPECT_EQ(read_checkpoint_info(store.resolve("last")).state.epoch, 33);
}

TEST(CheckpointStore, TruncatedOrFlippedNewestFallsBackToThePreviousOne) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 5);
  for (int e : {1, 2, 3}) write_checkpoint(store.periodic_path(e), e);
  flip_byte(store.periodic_path(3), 100);  // inside the archive: torch might even load it
  auto v = store.verify(store.periodic_path(3));
  EXPECT_EQ(v.status, Verification::Status::kMismatch);
  EXPECT_NE(v.detail.find("epoch_0003.pt: content does not match its SHA-256"), std::string::npos) << v.detail;
  EXPECT_EQ(store.resolve("last").filename(), "epoch_0002.pt");
  // Truncated too: the one before.
  const auto size = fs::file_size(store.periodic_path(2));
  fs::resize_file(store.periodic_path(2), size / 2);
  EXPECT_EQ(store.resolve("last").filename(), "epoch_0001.pt");
  // Asked for by path: an error, not a silent substitute.
  try {
    store.resolve(store.periodic_path(3).string());
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos);
  }
  // Nothing intact at all: exit code 2 with the reason.
  flip_byte(store.periodic_path(1), 10);
  try {
    store.resolve("last");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("none of the 3 checkpoints is intact"), std::string::npos) << e.what();
  }
}

TEST(CheckpointStore, FailedWriteLeavesTheOldFileAndNoTemporary) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  write_checkpoint(store.periodic_path(1), 1);
  const std::string before = test::read_text(store.periodic_path(1));
  const std::string manifest_before = test::read_text(store.manifest_path());
  EXPECT_THROW(store.commit(store.periodic_path(1),
                            [](const ByteSink& sink) {
                              sink("partial", 7);
                              throw IoError("simulated: No space left on device");
                            }),
               IoError);
  EXPECT_EQ(test::read_text(store.periodic_path(1)), before);
  EXPECT_EQ(test::read_text(store.manifest_path()), manifest_before);
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  EXPECT_TRUE(store.verify(store.periodic_path(1)).verified());
}

TEST(CheckpointStore, PruneKeepsTheNewestListedOnesAndNeverFewerThanTwo) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), /*keep_last=*/1);  // raised to the minimum of 2
  for (int e : {1, 2, 3, 4}) write_checkpoint(store.periodic_path(e), e);
  test::write_text(store.periodic_path(5), "not committed by the protocol");  // unlisted: not counted, kept
  store.prune();
  std::vector<std::string> names;
  for (const auto& p : store.periodic()) names.push_back(p.filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"epoch_0003.pt", "epoch_0004.pt", "epoch_0005.pt"}));
  const std::string manifest = test::read_text(store.manifest_path());
  EXPECT_EQ(manifest.find("epoch_0001.pt"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("epoch_0004.pt"), std::string::npos) << manifest;
}

TEST(CheckpointStore, StaleTemporariesOfDeadWritersAreRemoved) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  // A pid that cannot be running (above pid_max) and our own (alive: kept).
  test::write_text(dir / ".epoch_0002.pt.tmp.99999999.0", "partial");
  const std::string mine = fmt::format(".epoch_0003.pt.tmp.{}.0", ::getpid());
  test::write_text(dir / mine, "partial");
  store.remove_stale_temporaries();
  EXPECT_FALSE(fs::exists(dir / ".epoch_0002.pt.tmp.99999999.0"));
  EXPECT_TRUE(fs::exists(dir / mine));
}

TEST(CheckpointStore, WithoutAManifestTheNewestThatOpensIsUsed) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  for (int e : {1, 2}) write_checkpoint(store.periodic_path(e), e);
  fs::remove(store.manifest_path());
  test::write_text(store.periodic_path(3), "garbage");
  EXPECT_EQ(store.resolve("last").filename(), "epoch_0002.pt");
}

// Issue 35, defect 9: the manifest a kill between steps 2 and 4 of a commit leaves (a name listed
// with its old and its new hash, a line for a file never renamed into place) is tidied at the next
// start: one line per name, the hash its file has; a file that matches none keeps all its lines.
TEST(CheckpointStore, TidyManifestKeepsTheHashEachFileHasAndDropsMissingFiles) {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 2);
  write_checkpoint(store.best_path(), 1);
  const std::string old_line = test::read_text(store.manifest_path());
  write_checkpoint(store.best_path(), 2);
  write_checkpoint(store.periodic_path(2), 2);
  const std::string committed = test::read_text(store.manifest_path());
  test::write_text(store.manifest_path(), old_line + committed + std::string(64, 'b') + "  epoch_0003.pt\n");
  store.tidy_manifest();
  const std::string tidied = test::read_text(store.manifest_path());
  EXPECT_EQ(std::count(tidied.begin(), tidied.end(), '\n'), 2) << tidied;
  EXPECT_EQ(tidied.find(old_line), std::string::npos) << tidied;
  EXPECT_TRUE(store.verify(store.best_path()).verified());
  EXPECT_TRUE(store.verify(store.periodic_path(2)).verified());
  // best.pt damaged as well: neither hash matches, both stay (verification reports it).
  test::write_text(store.manifest_path(), old_line + committed);
  flip_byte(store.best_path(), 100);
  store.tidy_manifest();
  EXPECT_EQ(test::read_text(store.manifest_path()).size(), (old_line + committed).size());
  EXPECT_EQ(store.verify(store.best_path()).status, Verification::Status::kMismatch);
}

TEST(CheckpointCadence, EpochsAndMinutes) {
  CheckpointCadence every_two(2, 0.0, 5);
  EXPECT_FALSE(every_two.due_at_epoch_end(1));
  EXPECT_TRUE(every_two.due_at_epoch_end(2));
  EXPECT_TRUE(every_two.due_at_epoch_end(5));  // the last epoch always
  EXPECT_FALSE(every_two.due_inside_epoch());  // minutes off
  CheckpointCadence minutes(1, 1e-6, 5);       // 60 microseconds
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(minutes.due_inside_epoch());
  minutes.mark_saved();
  CheckpointCadence hour(1, 60.0, 5);
  EXPECT_FALSE(hour.due_inside_epoch());
}

}  // namespace
}  // namespace u3d
