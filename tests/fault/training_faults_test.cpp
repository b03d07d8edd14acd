// Fault injection in training, with real trainer processes and real signals: bit-exact resume after
// SIGKILL (at an epoch boundary and mid-epoch), graceful stop on SIGTERM/SIGINT/SIGHUP (also with
// a second and a third signal during the save), NaN/Inf steps, out of memory, the data preflight
// and predict-only over a corrupt case. Scenarios 5, 6, 10, 11 and 12 of docs/reliability.md.
#include <hdf5.h>
#include <signal.h>

#include <regex>

#include "fault_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/train/trainer.h"

namespace u3d {
namespace {

using test::TrainerProcess;

class TrainingFaults : public test::PhantomRunTest {
 protected:
  bool manifest_has(const std::string& name, const std::string& pattern) const {
    const fs::path m = ckpts(name) / "manifest.sha256";
    return fs::exists(m) && std::regex_search(test::read_text(m), std::regex(pattern));
  }
  size_t steps_logged(const std::string& name) const {
    const fs::path p = run(name) / "steps.csv";
    return fs::exists(p) ? test::count_lines(p) - 1 : 0;
  }
};

// The columns a resumed run must reproduce exactly (timings aside).
std::string exact_columns(const fs::path& metrics) {
  std::string out;
  for (const auto& row : test::read_csv(metrics)) {
    for (const char* col : {"epoch", "step", "lr", "train_loss", "val_loss", "val_mae", "best", "skipped_steps"}) {
      out += row.at(col) + ",";
    }
    out += "\n";
  }
  return out;
}

// Scenario 5: 2N steps straight vs N steps, SIGKILL, resume to 2N, in deterministic CPU mode:
// every per-step loss, every metrics row and the final weights are identical, for a kill after an
// epoch-end checkpoint and for one after a mid-epoch checkpoint (checkpoint.every_minutes).
TEST_F(TrainingFaults, ResumeAfterSigkillIsBitExactAtAnEpochBoundaryAndMidEpoch) {
  const std::vector<std::pair<std::string, std::string>> common = {
      {"training.epochs", "4"}, {"training.steps_per_epoch", "6"}, {"logging.step_log", "true"}};
  config("straight", common);
  ASSERT_EQ(trainer({"--config", "straight.yaml"}).exit_code, 0);
  ASSERT_EQ(steps_logged("straight"), 24u);

  struct Case {
    std::string name, pattern, resume_marker;
    std::vector<std::pair<std::string, std::string>> extra;
  };
  const std::vector<Case> cases = {
      {"boundary", "epoch_0002\\.pt", "(end of epoch ", {}},
      {"midepoch",
       "epoch_0002_step_0000\\d\\d\\.pt",
       "(inside epoch ",
       {{"checkpoint.every_minutes", "0.0002"}, {"checkpoint.every_epochs", "1000"}}},
  };
  for (const auto& c : cases) {
    auto sets = common;
    sets.insert(sets.end(), c.extra.begin(), c.extra.end());
    config(c.name, sets);
    {
      TrainerProcess p({"--config", c.name + ".yaml"}, dir.path());
      ASSERT_TRUE(p.wait_until([&] { return manifest_has(c.name, c.pattern); })) << p.output();
      p.signal(SIGKILL);
      ASSERT_EQ(p.wait(), 128 + SIGKILL);
    }
    const auto r = trainer({"--config", c.name + ".yaml", "--resume"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(test::contains(r.output, c.resume_marker)) << c.name << "\n" << r.output;
    EXPECT_FALSE(test::contains(r.output, "end of epoch 4")) << "the kill came too late to test anything";
    // Every step's loss and learning rate, bit for bit (9 significant digits of a float32).
    EXPECT_EQ(test::read_text(run(c.name) / "steps.csv"), test::read_text(run("straight") / "steps.csv")) << c.name;
    EXPECT_EQ(exact_columns(run(c.name) / "metrics.csv"), exact_columns(run("straight") / "metrics.csv")) << c.name;
    test::expect_same_weights(ckpts(c.name) / "epoch_0004.pt", ckpts("straight") / "epoch_0004.pt");
  }
}

// Scenario 6: SIGTERM mid-epoch exits 143 after writing a checkpoint at that step; the resume goes
// on at the next step. SIGINT and SIGHUP likewise (130, 129). A second signal during the save
// changes nothing; a third exits at once and the previous checkpoint stays intact.
TEST_F(TrainingFaults, StopSignalsWriteACheckpointAndTheRunContinuesAtTheNextStep) {
  config("s", {{"training.epochs", "2"}, {"training.steps_per_epoch", "2000"}, {"logging.step_log", "true"}});
  auto last_step = [&] {
    const auto rows = test::read_csv(run("s") / "steps.csv");
    return rows.empty() ? int64_t{0} : std::stoll(rows.back().at("step"));
  };
  int64_t stopped_at = 0;
  const std::vector<std::pair<int, int>> signals = {{SIGTERM, 143}, {SIGINT, 130}, {SIGHUP, 129}};
  for (size_t i = 0; i < signals.size(); ++i) {
    std::vector<std::string> args = {"--config", "s.yaml"};
    if (i > 0) args.push_back("--resume");
    TrainerProcess p(args, dir.path());
    ASSERT_TRUE(p.wait_until([&] { return static_cast<int64_t>(steps_logged("s")) >= stopped_at + 5; })) << p.output();
    p.signal(signals[i].first);
    ASSERT_EQ(p.wait(), signals[i].second) << p.output();
    const std::string out = p.output();
    if (i > 0) {
      EXPECT_TRUE(
          test::contains(out, fmt::format("inside epoch 1 after step {}, global step {}", stopped_at, stopped_at)))
          << out;
    }
    const int64_t step = last_step();
    EXPECT_GT(step, stopped_at);
    const fs::path checkpoint = ckpts("s") / fmt::format("epoch_0001_step_{:06d}.pt", step);
    ASSERT_TRUE(fs::exists(checkpoint)) << out;
    EXPECT_TRUE(CheckpointStore(ckpts("s"), 2).verify(checkpoint).verified());
    EXPECT_EQ(read_checkpoint_info(checkpoint).state.step_in_epoch, step);
    EXPECT_TRUE(
        test::contains(out, fmt::format("stopped by {} at epoch 1 step {}", StopSignals::name(signals[i].first), step)))
        << out;
    EXPECT_TRUE(test::contains(test::read_text(run("s") / "train.log"), "stopped by")) << "log not flushed";
    EXPECT_EQ(test::read_csv(run("s") / "metrics.csv").size(), 0u);  // no row for an unfinished epoch
    // The steps continue without a gap or a repeat.
    const auto rows = test::read_csv(run("s") / "steps.csv");
    for (size_t k = 0; k < rows.size(); ++k) ASSERT_EQ(rows[k].at("step"), std::to_string(k + 1));
    stopped_at = step;
  }

  // Started under nohup (SIGHUP ignored), a hang-up does not stop the run.
  {
    test::ProcessOptions nohup;
    nohup.ignore_sighup = true;
    TrainerProcess p({"--config", "s.yaml", "--resume"}, dir.path(), nohup);
    ASSERT_TRUE(p.wait_until([&] { return static_cast<int64_t>(steps_logged("s")) >= stopped_at + 2; }));
    p.signal(SIGHUP);
    const size_t at_hangup = steps_logged("s");
    ASSERT_TRUE(p.wait_until([&] { return steps_logged("s") >= at_hangup + 20; })) << p.output();
    EXPECT_TRUE(p.running());
    p.signal(SIGTERM);
    ASSERT_EQ(p.wait(), 143) << p.output();
    stopped_at = last_step();
  }

  // A second signal while the checkpoint is being written (slowed down): the save completes.
  test::ProcessOptions slow = test::with_faults("checkpoint_delay@150");
  {
    TrainerProcess p({"--config", "s.yaml", "--resume"}, dir.path(), slow);
    ASSERT_TRUE(p.wait_until([&] { return static_cast<int64_t>(steps_logged("s")) >= stopped_at + 3; }));
    p.signal(SIGTERM);
    ASSERT_TRUE(p.wait_until([&] { return !test::temporaries(ckpts("s")).empty(); })) << p.output();
    p.signal(SIGTERM);
    ASSERT_EQ(p.wait(), 143) << p.output();
    EXPECT_TRUE(test::contains(p.output(), "already stopping")) << p.output();
    const int64_t step = last_step();
    const fs::path checkpoint = ckpts("s") / fmt::format("epoch_0001_step_{:06d}.pt", step);
    EXPECT_TRUE(CheckpointStore(ckpts("s"), 2).verify(checkpoint).verified()) << p.output();
    EXPECT_TRUE(test::temporaries(ckpts("s")).empty());
    stopped_at = step;
  }
  // A third signal exits at once: the write in progress is abandoned, the previous one is intact.
  {
    TrainerProcess p({"--config", "s.yaml", "--resume"}, dir.path(), slow);
    ASSERT_TRUE(p.wait_until([&] { return static_cast<int64_t>(steps_logged("s")) >= stopped_at + 3; }));
    p.signal(SIGTERM);
    ASSERT_TRUE(p.wait_until([&] { return !test::temporaries(ckpts("s")).empty(); })) << p.output();
    p.signal(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // signals of one kind do not queue
    p.signal(SIGTERM);
    ASSERT_EQ(p.wait(), 143) << p.output();
    EXPECT_TRUE(test::contains(p.output(), "third signal: exiting now")) << p.output();
    const auto newest = CheckpointStore(ckpts("s"), 2).newest_valid();
    ASSERT_TRUE(newest);
    EXPECT_EQ(newest->filename(), fmt::format("epoch_0001_step_{:06d}.pt", stopped_at));
  }
  // The next start removes the abandoned temporary file and continues from the intact checkpoint.
  TrainerProcess p({"--config", "s.yaml", "--resume"}, dir.path());
  // (steps.csv still holds the abandoned run's later steps until this run resumes and trims it)
  ASSERT_TRUE(p.wait_until([&] {
    return test::contains(p.output(), "resume: ") && static_cast<int64_t>(steps_logged("s")) >= stopped_at + 2;
  })) << p.output();
  EXPECT_TRUE(test::contains(p.output(), "by an interrupted write")) << p.output();
  EXPECT_TRUE(test::temporaries(ckpts("s")).empty());
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 143);
  EXPECT_TRUE(test::contains(p.output(), fmt::format("inside epoch 1 after step {}", stopped_at))) << p.output();
}

// A stop during validation (slowed by the slow_val fault) checkpoints after the epoch's last step;
// the resumed run's row for that epoch reports the whole epoch's training time and rate (it used
// to show epoch_seconds 0.000: the resumed process ran no step of it).
TEST_F(TrainingFaults, StopDuringValidationKeepsTheEpochTimeInItsRow) {
  config("v", {{"training.epochs", "2"}, {"training.steps_per_epoch", "20"}, {"logging.step_log", "true"}});
  test::ProcessOptions slow = test::with_faults("slow_val@1000");
  {
    TrainerProcess p({"--config", "v.yaml"}, dir.path(), slow);
    ASSERT_TRUE(p.wait_until([&] { return steps_logged("v") >= 20; })) << p.output();
    p.signal(SIGTERM);
    ASSERT_EQ(p.wait(), 143) << p.output();
    EXPECT_TRUE(test::contains(p.output(), "at epoch 1 step 20 (global step 20)")) << p.output();
    EXPECT_FALSE(fs::exists(run("v") / "metrics.csv") && test::read_csv(run("v") / "metrics.csv").size() > 0);
  }
  const auto resumed = trainer({"--config", "v.yaml", "--resume"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto rows = test::read_csv(run("v") / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    const double seconds = std::stod(row.at("epoch_seconds"));
    const double rate = std::stod(row.at("samples_per_second"));
    const double share = std::stod(row.at("data_share"));
    EXPECT_GT(seconds, 0.0) << "epoch " << row.at("epoch");
    EXPECT_NEAR(rate * seconds, 20.0 * 2.0, 2.0) << "epoch " << row.at("epoch") << ": 20 steps of 2 samples";
    EXPECT_GE(share, 0.0);
    EXPECT_LE(share, 1.0);
  }
}

// Scenario 10: a NaN in a batch and an Inf in a gradient are skipped and counted; K skips in a row
// stop the run with the last good checkpoint intact; a non-finite validation result is never best.
TEST_F(TrainingFaults, NonFiniteStepsAreSkippedCountedAndStopTheRunWhenTheyPersist) {
  config("nf", {{"training.epochs", "2"}, {"training.steps_per_epoch", "4"}, {"logging.step_log", "true"}});
  test::ProcessOptions faults = test::with_faults("nan_batch@2,inf_grad@3");
  TrainerProcess p({"--config", "nf.yaml"}, dir.path(), faults);
  ASSERT_EQ(p.wait(), 0) << p.output();
  const auto rows = test::read_csv(run("nf") / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("skipped_steps"), "2");
  EXPECT_EQ(rows[1].at("skipped_steps"), "0");
  EXPECT_TRUE(std::isfinite(std::stod(rows[0].at("train_loss"))));
  const auto steps = test::read_csv(run("nf") / "steps.csv");
  ASSERT_EQ(steps.size(), 8u);
  EXPECT_EQ(steps[1].at("skipped"), "1");
  EXPECT_EQ(steps[1].at("loss"), "nan");   // the NaN batch
  EXPECT_EQ(steps[2].at("skipped"), "1");  // a finite loss with an Inf gradient
  EXPECT_TRUE(std::isfinite(std::stod(steps[2].at("loss"))));
  for (size_t i : {0u, 3u, 4u, 7u}) EXPECT_EQ(steps[i].at("skipped"), "0") << i;

  // From step 6 on every batch holds a NaN: the run stops after 3 skips in a row, before writing
  // the epoch-2 checkpoint; epoch 1's checkpoint is intact.
  config("k", {{"training.epochs", "10"}, {"training.steps_per_epoch", "4"}, {"training.max_nonfinite_steps", "3"}});
  faults.env["U3D_TEST_FAULTS"] = "nan_batch@6-40";
  TrainerProcess k({"--config", "k.yaml"}, dir.path(), faults);
  test::expect_exit(k, 1,
                    {"training stopped at global step 8: 3 steps in a row had a non-finite loss or gradient norm",
                     "training.max_nonfinite_steps = 3", "epoch_0001.pt is intact"});
  EXPECT_TRUE(CheckpointStore(ckpts("k"), 2).verify(ckpts("k") / "epoch_0001.pt").verified());
  EXPECT_FALSE(fs::exists(ckpts("k") / "epoch_0002.pt"));

  // A NaN validation result in epoch 2 is never the best.
  config("v", {{"training.epochs", "3"}, {"training.steps_per_epoch", "3"}});
  faults.env["U3D_TEST_FAULTS"] = "nan_val@2";
  TrainerProcess v({"--config", "v.yaml"}, dir.path(), faults);
  ASSERT_EQ(v.wait(), 0) << v.output();
  EXPECT_TRUE(test::contains(v.output(),
                             "epoch 2: the validation val_mae is not finite; it is never taken as the "
                             "best"))
      << v.output();
  const auto vrows = test::read_csv(run("v") / "metrics.csv");
  ASSERT_EQ(vrows.size(), 3u);
  EXPECT_EQ(vrows[1].at("best"), "0");
  EXPECT_EQ(vrows[1].at("val_mae"), "");
  EXPECT_NE(read_checkpoint_info(ckpts("v") / "best.pt").state.best_epoch, 2);
  EXPECT_TRUE(std::isfinite(read_checkpoint_info(ckpts("v") / "best.pt").state.best_metric));
}

// The skip is exact: a NaN batch leaves parameters, batch-norm statistics and optimizer state as
// they were (in-process, through Trainer::train_step).
TEST_F(TrainingFaults, SkippedStepChangesNoWeightNoBufferAndNoOptimizerState) {
  Config cfg = load_config_from_string(test::tiny_config((dir / "p.h5").string(), "inproc"), "inproc.yaml",
                                       {"experiment.output_dir=" + (dir / "runs").string(), "model.norm=batch"});
  Trainer t(cfg, TrainOptions{});
  t.prepare_run();
  t.setup_runtime();
  t.load_data();
  t.build_model();
  torch::manual_seed(3);
  Batch good;
  good.image = torch::rand({2, 5, 16, 16, 16});
  good.target = torch::rand({2, 1, 16, 16, 16});
  good.mask = torch::ones({2, 1, 16, 16, 16});
  t.train_step(good);  // moments and statistics off their initial values
  std::map<std::string, torch::Tensor> before;
  for (const auto& p : t.network().named_parameters()) before[p.key()] = p.value().detach().clone();
  for (const auto& b : t.network().named_buffers()) before[b.key()] = b.value().clone();
  ASSERT_GT(t.network().named_buffers().size(), 0u);
  Batch bad = good;
  bad.image = good.image.clone();
  bad.image[1][2][3][4][5] = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor loss = t.train_step(bad);
  EXPECT_TRUE(std::isnan(loss.item<float>()));
  for (const auto& p : t.network().named_parameters()) EXPECT_TRUE(torch::equal(p.value(), before[p.key()])) << p.key();
  for (const auto& b : t.network().named_buffers()) EXPECT_TRUE(torch::equal(b.value(), before[b.key()])) << b.key();
  EXPECT_EQ(t.optimizer().steps_applied(), 1);
  t.train_step(good);
  EXPECT_EQ(t.optimizer().steps_applied(), 2);
  const auto params = t.network().named_parameters();
  EXPECT_FALSE(torch::equal(params.begin()->value(), before[params.begin()->key()]))
      << "a good step must change the weights";
}

// Out of memory stops with the settings that matter (host memory here: an address-space limit).
TEST_F(TrainingFaults, OutOfMemoryNamesBatchPatchPrecisionAndPeak) {
  config("oom", {{"data.batch_size", "1024"}, {"model.base_filters", "64"}, {"data.val_split", "\"\""}});
  test::ProcessOptions limited;
  limited.address_space_limit = uint64_t{3} << 30;
  TrainerProcess p({"--config", "oom.yaml"}, dir.path(), limited);
  const std::string out = test::expect_exit(p, 1,
                                            {"out of host memory during the training step on cpu: data.batch_size = "
                                             "1024, data.patch_size = [16, 16, 16], precision fp32, peak ",
                                             "lower data.batch_size or data.patch_size"});
  EXPECT_FALSE(test::contains(out, "terminate called")) << out;
}

// ---------------------------------------------------------------------------------------------
// Damaging a dataset file with the HDF5 library itself.

// Replaces `path` in `file` with `t` (contiguous, uncompressed).
void replace_dataset(const fs::path& file, const std::string& path, const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.contiguous();
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Ldelete(f, path.c_str(), H5P_DEFAULT);
  std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t type = t.scalar_type() == torch::kFloat   ? H5T_NATIVE_FLOAT
                     : t.scalar_type() == torch::kUInt8 ? H5T_NATIVE_UINT8
                                                        : H5T_NATIVE_INT64;
  hid_t d = H5Dcreate2(f, path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  ASSERT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()), 0);
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
}

// Overwrites the stored bytes of the first chunk of `path` (compressed data) with 0xFF.
void corrupt_first_chunk(const fs::path& file, const std::string& path) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hsize_t offset[4] = {0, 0, 0, 0};
  unsigned filter_mask = 0;
  haddr_t address = 0;
  hsize_t size = 0;
  const hid_t space = H5Dget_space(d);
  ASSERT_GE(H5Dget_chunk_info(d, space, 0, offset, &filter_mask, &address, &size), 0);
  ASSERT_GT(size, 0u);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(address));
  const std::string garbage(static_cast<size_t>(size), '\xFF');
  io.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
}

std::vector<std::string> split_ids(const fs::path& file, const std::string& split) {
  return DatasetReader(file).split(split);
}

// Scenario 11: the preflight names file, case and field of each problem; training refuses errors
// and trains through warnings (empty target, empty mask: the sampler copes).
TEST_F(TrainingFaults, PreflightNamesEveryProblemAndTrainingRefusesErrors) {
  fs::copy_file(dir / "p.h5", dir / "bad.h5");
  const auto train = split_ids(dir / "bad.h5", "train");
  ASSERT_GE(train.size(), 5u);
  torch::Tensor image = DatasetReader(dir / "p.h5").read_case(train[0]).image.clone();
  image[0][1][2][3] = std::numeric_limits<float>::quiet_NaN();
  replace_dataset(dir / "bad.h5", "cases/" + train[0] + "/image", image);
  replace_dataset(dir / "bad.h5", "cases/" + train[1] + "/mask", torch::ones({15, 16, 16}, torch::kUInt8));
  replace_dataset(dir / "bad.h5", "cases/" + train[2] + "/target", torch::zeros({16, 16, 16}));
  replace_dataset(dir / "bad.h5", "cases/" + train[3] + "/mask", torch::zeros({16, 16, 16}, torch::kUInt8));
  corrupt_first_chunk(dir / "bad.h5", "cases/" + train[4] + "/image");
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 4, 16);
  const auto seg_id = split_ids(dir / "seg.h5", "train")[0];
  replace_dataset(dir / "seg.h5", "cases/" + seg_id + "/target", torch::full({16, 16, 16}, 7, torch::kLong));
  {
    std::string bytes = test::read_text(dir / "p.h5");
    test::write_text(dir / "truncated.h5", bytes.substr(0, bytes.size() / 2));
  }

  auto r = trainer({"check-data", "bad.h5"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const std::vector<std::string> expected = {
      fmt::format("error   bad.h5: case '{}': 'image': holds 1 NaN or Inf voxel (first at index (0, 1, 2, 3))",
                  train[0]),
      fmt::format("error   bad.h5: case '{}': 'mask': shape mismatch: mask is (15, 16, 16) but the image is (16, 16, "
                  "16) spatially",
                  train[1]),
      fmt::format("warning bad.h5: case '{}': 'target': is empty (all zero)", train[2]),
      fmt::format("warning bad.h5: case '{}': 'mask': is empty (all zero)", train[3]),
      fmt::format("error   bad.h5: case '{}': 'image': cannot be read (truncated or corrupt HDF5 data)", train[4]),
      "3 error(s) in 3 case(s), 2 warning(s); training refuses these cases"};
  for (const auto& line : expected) EXPECT_TRUE(test::contains(r.output, line)) << line << "\n" << r.output;
  r = trainer({"check-data", "seg.h5"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(test::contains(r.output, fmt::format("error   seg.h5: case '{}': 'target': label values {{7}} are "
                                                   "outside the declared classes 0..3",
                                                   seg_id)))
      << r.output;
  r = trainer({"check-data", "truncated.h5"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(test::contains(r.output, "error   truncated.h5: ")) << r.output;
  EXPECT_EQ(trainer({"check-data", "p.h5"}).exit_code, 0);

  // Training refuses the file with errors before anything is written.
  config("pre", {{"training.epochs", "1"}}, "bad.h5");
  r = trainer({"--config", "pre.yaml"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(test::contains(r.output, "bad.h5: the preflight found 3 error(s) in 3 of the 8 train/val cases"))
      << r.output;
  EXPECT_TRUE(test::contains(r.output, fmt::format("preflight: bad.h5: case '{}': 'image': cannot be read", train[4])))
      << r.output;
  EXPECT_FALSE(fs::exists(ckpts("pre") / "epoch_0001.pt"));

  // Warnings only (an empty target, an empty mask): training runs, foreground sampling included.
  fs::copy_file(dir / "p.h5", dir / "warn.h5");
  replace_dataset(dir / "warn.h5", "cases/" + train[2] + "/target", torch::zeros({16, 16, 16}));
  replace_dataset(dir / "warn.h5", "cases/" + train[3] + "/mask", torch::zeros({16, 16, 16}, torch::kUInt8));
  config("warn", {{"training.epochs", "2"}, {"data.foreground_fraction", "0.5"}, {"data.batch_size", "6"}}, "warn.h5");
  r = trainer({"--config", "warn.yaml"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, fmt::format("case '{}': 'target': is empty (all zero)", train[2]))) << r.output;
  EXPECT_TRUE(test::contains(r.output, fmt::format("sampler: case '{}' has no foreground", train[2]))) << r.output;
  for (const auto& row : test::read_csv(run("warn") / "metrics.csv")) {
    EXPECT_TRUE(std::isfinite(std::stod(row.at("train_loss"))));
  }
}

// Scenario 12: --predict-only over a split with one corrupt case predicts the others and reports
// the bad one.
TEST_F(TrainingFaults, PredictOnlySkipsACorruptCaseAndPredictsTheRest) {
  config("pr", {{"training.epochs", "1"}});
  ASSERT_EQ(trainer({"--config", "pr.yaml"}).exit_code, 0);
  fs::copy_file(dir / "p.h5", dir / "pred.h5");
  const auto val = split_ids(dir / "pred.h5", "val");
  ASSERT_EQ(val.size(), 2u);
  corrupt_first_chunk(dir / "pred.h5", "cases/" + val[0] + "/image");
  const auto r = trainer({"--config", "pr.yaml", "--predict-only", "--set", "data.path=pred.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, fmt::format("predict: skipping 1 of 2 case(s) with errors: {}", val[0])))
      << r.output;
  const fs::path predictions = run("pr") / "predictions";
  const auto skipped = test::read_csv(predictions / "val_skipped.csv");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].at("case"), val[0]);
  EXPECT_EQ(skipped[0].at("field"), "image");
  EXPECT_TRUE(test::contains(skipped[0].at("problem"), "cannot be read"));
  hid_t f = H5Fopen((predictions / "val.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GT(H5Lexists(f, ("cases/" + val[1]).c_str(), H5P_DEFAULT), 0);
  EXPECT_LE(H5Lexists(f, ("cases/" + val[0]).c_str(), H5P_DEFAULT), 0);
  H5Fclose(f);
  const auto metrics = test::read_csv(predictions / "val_metrics.csv");
  ASSERT_EQ(metrics.size(), 2u);  // the good case and the mean
  EXPECT_EQ(metrics[0].at("case"), val[1]);
}

}  // namespace
}  // namespace u3d
