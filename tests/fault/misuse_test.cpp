// Misuse by a hostile but fair user (issue 13), with real processes, signals, flock, HDF5 files and
// full file systems: a second trainer on a busy run folder, HDF5 and folder writers on a full disk, thread
// settings beyond the machine, forged case ids, stale prediction outputs, signals during writes,
// and a table of malformed configs and dataset files through the CLI.
#include <fmt/format.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "fault_support.h"
#include "u3d/core/run_lock.h"

namespace u3d {
namespace {

using test::TrainerProcess;

// Lines of output that report an error (spdlog's "[error]" or check-data's "error").
size_t error_lines(const std::string& output) {
  size_t n = 0;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) n += line.find("error") != std::string::npos ? 1 : 0;
  return n;
}

// No crash and no stack trace, whatever the exit code.
void expect_clean_failure(const test::CommandResult& r) {
  EXPECT_LT(r.exit_code, 128) << r.output;
  EXPECT_FALSE(test::contains(r.output, "Segmentation")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "frame #")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "Exception raised from")) << r.output;
  EXPECT_FALSE(test::contains(r.output, "terminate called")) << r.output;
}

// `r` exited 1 without a crash (expect_clean_failure) and its output holds each of `needles`.
void expect_refused(const test::CommandResult& r, const std::vector<std::string>& needles) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const auto& needle : needles) EXPECT_TRUE(test::contains(r.output, needle)) << r.output;
  expect_clean_failure(r);
}

class Misuse : public test::PhantomRunTest {
 protected:
  // `trainer check-data <dataset>` and a run of the tiny config <name>.yaml on it (written here) are
  // both refused (expect_refused), the check naming each of `check`, the run each of `train`; the
  // run's output.
  std::string expect_check_and_run_refused(const std::string& dataset, const std::string& name,
                                           const std::vector<std::string>& check,
                                           const std::vector<std::string>& train) {
    expect_refused(trainer({"check-data", dataset}), check);
    config(name, {}, dataset);
    const auto r = trainer({"--config", name + ".yaml"});
    expect_refused(r, train);
    return r.output;
  }
};

// Names in `folder` (empty when it does not exist).
std::set<std::string> entries(const fs::path& folder) {
  std::set<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) out.insert(e.path().filename().string());
  return out;
}

// The PID of a process that has ended (forked, exited and reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// Defect 1: a second trainer on a run folder in use stops at once (exit 2) naming the folder and the
// PID holding it, for training, --resume and --predict-only; the first run is undisturbed; after a
// SIGKILL the kernel has released the lock.
TEST_F(Misuse, SecondTrainerOnABusyRunFolderStopsAtOnceNamingTheHolder) {
  config("race", {{"training.epochs", "400"}, {"checkpoint.every_epochs", "1"}});
  TrainerProcess first({"--config", "race.yaml"}, dir.path());
  const fs::path lock = run("race") / RunLock::kFileName;
  const fs::path manifest = run("race") / "checkpoints" / "manifest.sha256";
  ASSERT_TRUE(first.wait_until([&] { return fs::exists(manifest) && !test::read_text(manifest).empty(); }))
      << first.output();
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--resume"}, std::vector<std::string>{"--predict-only"}}) {
    std::vector<std::string> args = {"--config", "race.yaml"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto second = trainer(args);
    EXPECT_EQ(second.exit_code, 2) << second.output;
    EXPECT_TRUE(test::contains(second.output, run("race").filename().string())) << second.output;
    EXPECT_TRUE(test::contains(second.output, "PID " + std::to_string(first.pid()))) << second.output;
    EXPECT_EQ(error_lines(second.output), 1u) << second.output;
    expect_clean_failure(second);
  }
  EXPECT_TRUE(first.running()) << first.output();
  first.signal(SIGKILL);
  ASSERT_EQ(first.wait(), 128 + SIGKILL);
  ASSERT_TRUE(fs::exists(lock));  // left in place; the kernel released the lock with the process
  const auto after = trainer({"--config", "race.yaml", "--predict-only"});
  EXPECT_EQ(after.exit_code, 0) << after.output;
  EXPECT_FALSE(test::contains(after.output, "in use")) << after.output;
}

// Defect 2: HDF5 writers on a full file system (a real tmpfs): exit 1 with one line naming the file
// and the free space, never a crash at exit (was 139 in H5F__close_cb), and no staged file left.
TEST_F(Misuse, HdfWritersOnAFullDiskExitOneNamingTheFileAndLeaveNothing) {
  if (!test::private_mount_namespace()) GTEST_SKIP() << "no private mount namespace (needs CAP_SYS_ADMIN)";
  const fs::path small = dir / "small";
  if (!test::mount_tmpfs(small, "1m")) GTEST_SKIP() << "cannot mount a tmpfs";
  test::write_text(small / "fill", std::string(1000000, '\0'));
  const auto before = entries(small);

  const auto synth = trainer({"synth", "--task", "dose", "--cases", "4", "--size", "32", "--out", "small/s.h5"});
  EXPECT_EQ(synth.exit_code, 1) << synth.output;
  EXPECT_TRUE(test::contains(synth.output, "s.h5")) << synth.output;
  EXPECT_TRUE(test::contains(synth.output, "free on its file system")) << synth.output;
  EXPECT_EQ(error_lines(synth.output), 1u) << synth.output;
  expect_clean_failure(synth);
  EXPECT_EQ(entries(small), before);

  ASSERT_EQ(trainer({"synth", "--task", "segmentation", "--cases", "4", "--size", "32", "--format", "nnunet", "--out",
                     "Dataset001_Phantom"})
                .exit_code,
            0);
  const auto nnunet = trainer({"import", "nnunet", "--source", "Dataset001_Phantom", "--out", "small/seg.h5"});
  EXPECT_EQ(nnunet.exit_code, 1) << nnunet.output;
  EXPECT_TRUE(test::contains(nnunet.output, "seg.h5")) << nnunet.output;
  EXPECT_TRUE(test::contains(nnunet.output, "free on its file system")) << nnunet.output;
  expect_clean_failure(nnunet);
  EXPECT_EQ(entries(small), before);
  // Folder outputs (issue 35): staged, so a full disk leaves no folder (it left empty imagesTr/ and
  // labelsTr/, or images/ and labels/).
  for (const std::string format : {"nnunet", "tiff"}) {
    const auto r = trainer(
        {"synth", "--task", "segmentation", "--cases", "4", "--size", "32", "--format", format, "--out", "small/out"});
    EXPECT_EQ(r.exit_code, 1) << format << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1u) << r.output;
    expect_clean_failure(r);
    EXPECT_EQ(entries(small), before) << format << ": " << r.output;
  }
  test::unmount(small);
}

// Defect 3: thread settings beyond the machine are a config error naming the key and the cores,
// before anything is written.
TEST_F(Misuse, ThreadSettingsBeyondTheMachineAreConfigErrors) {
  config("t", {});
  for (const char* key : {"training.threads", "data.workers"}) {
    const auto r = trainer({"--config", "t.yaml", "--set", std::string(key) + "=100000"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(test::contains(r.output, key)) << r.output;
    EXPECT_TRUE(test::contains(r.output, "cores")) << r.output;
    expect_clean_failure(r);
  }
  const auto prefetch = trainer({"--config", "t.yaml", "--set", "data.prefetch=100000000"});
  EXPECT_EQ(prefetch.exit_code, 2) << prefetch.output;
  EXPECT_TRUE(test::contains(prefetch.output, "data.prefetch")) << prefetch.output;
  const auto check = trainer({"check-data", "p.h5", "--threads", "100000"});
  EXPECT_EQ(check.exit_code, 2) << check.output;
  EXPECT_TRUE(test::contains(check.output, "--threads")) << check.output;
  EXPECT_FALSE(fs::exists(run("t")));
}

// Renames case `from` to `to` in a dataset file, in /cases and in every split (forged by hand, as
// another tool could write it).
void rename_case(const fs::path& file, const std::string& from, const std::string& to) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Lmove(f, ("cases/" + from).c_str(), f, ("cases/" + to).c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
  for (const char* split : {"splits/train", "splits/val"}) {
    if (H5Lexists(f, split, H5P_DEFAULT) <= 0) continue;
    const hid_t d = H5Dopen2(f, split, H5P_DEFAULT);
    const hid_t type = H5Dget_type(d);
    const hid_t space = H5Dget_space(d);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    std::vector<char*> raw(static_cast<size_t>(n));
    const hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5T_CSET_UTF8);
    ASSERT_GE(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), 0);
    std::vector<std::string> ids(raw.begin(), raw.end());
    H5Dvlen_reclaim(mem, space, H5P_DEFAULT, raw.data());
    H5Dclose(d);
    for (auto& id : ids) {
      if (id == from) id = to;
    }
    std::vector<const char*> ptrs;
    for (const auto& id : ids) ptrs.push_back(id.c_str());
    H5Ldelete(f, split, H5P_DEFAULT);
    const hid_t nd = H5Dcreate2(f, split, mem, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(nd, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), 0);
    H5Dclose(nd);
    H5Tclose(mem);
    H5Sclose(space);
    H5Tclose(type);
  }
  H5Fclose(f);
}

// Defect 4: case ids that break the documented rule are refused when a file is opened, naming the
// id on one line (a comma and a newline used to pass check-data and corrupt the predictions CSV).
TEST_F(Misuse, CaseIdsAreCheckedWhenADatasetFileIsOpened) {
  DatasetReader reader(dir / "p.h5");
  const std::string victim = reader.split("val").front();
  for (const std::string& forged : {std::string("case 001!"), std::string("a,b\nc")}) {
    fs::copy_file(dir / "p.h5", dir / "forged.h5", fs::copy_options::overwrite_existing);
    rename_case(dir / "forged.h5", victim, forged);
    expect_check_and_run_refused("forged.h5", "ids",
                                 {forged == "case 001!" ? "case 001!" : "a,b\\x0ac", "letters, digits"},
                                 {"letters, digits"});
    EXPECT_FALSE(fs::exists(run("ids") / "checkpoints" / "manifest.sha256"));
  }
}

// Defect 5 and 6: --predict-only writes one set of outputs (the earlier set's files are removed,
// the checkpoint used is recorded), and removes staged files of processes that no longer exist.
TEST_F(Misuse, PredictOnlyReplacesTheWholeSetAndRecordsTheCheckpoint) {
  config("pred", {{"training.epochs", "2"}, {"checkpoint.every_epochs", "1"}});
  ASSERT_EQ(trainer({"--config", "pred.yaml"}).exit_code, 0);
  const fs::path out = run("pred") / "predictions";
  ASSERT_EQ(trainer({"--config", "pred.yaml", "--predict-only"}).exit_code, 0);
  ASSERT_TRUE(fs::exists(out / "val.h5"));
  // An earlier set that skipped a case, and a writer killed mid-write.
  test::write_text(out / "val_skipped.csv", "case,field,problem\nx,image,NaN\n");
  const fs::path staged = out / fmt::format(".val.h5.partial.{}", dead_pid());
  test::write_text(staged, "half a file");
  const auto r = trainer({"--config", "pred.yaml", "--predict-only", "--checkpoint", "last"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out / "val_skipped.csv"));
  EXPECT_FALSE(fs::exists(staged));
  const std::string manifest = test::read_text(out / "val_outputs.txt");
  EXPECT_TRUE(test::contains(manifest, "epoch_0002.pt")) << manifest;
  EXPECT_TRUE(test::contains(manifest, "val.h5")) << manifest;
  EXPECT_TRUE(test::contains(r.output, "epoch_0002.pt")) << r.output;
}

// Defect 6: SIGTERM while an HDF5 file is being written: one line, exit 143, no staged file, no
// output file.
TEST_F(Misuse, SigtermDuringAWriteRemovesTheStagedFileAndSaysSo) {
  TrainerProcess p({"synth", "--task", "dose", "--cases", "4000", "--size", "32", "--out", "big.h5"}, dir.path());
  const fs::path staged = dir / fmt::format(".big.h5.partial.{}", p.pid());
  ASSERT_TRUE(p.wait_until([&] { return fs::exists(staged) && fs::file_size(staged) > 100000; })) << p.output();
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 128 + SIGTERM) << p.output();
  EXPECT_TRUE(test::contains(p.output(), "stopped by SIGTERM")) << p.output();
  EXPECT_FALSE(fs::exists(staged));
  EXPECT_FALSE(fs::exists(dir / "big.h5"));
}

// Forged dataset files and malformed configs through the CLI: for each, the exit code, one error
// line naming the key or case, no crash, no stack trace, and no run folder.
TEST_F(Misuse, MalformedConfigsAndForgedFilesTable) {
  struct Row {
    std::vector<std::string> sets;
    int exit_code;
    std::string names;
  };
  const std::vector<Row> rows = {
      {{"training.threads=100000"}, 2, "training.threads"},
      {{"data.workers=100000"}, 2, "data.workers"},
      {{"data.prefetch=5000"}, 2, "data.prefetch"},
      {{"training.epochs=-1"}, 2, "training.epochs"},
      {{"data.batch_size=0"}, 2, "data.batch_size"},
      {{"data.patch_size=[15,16,16]"}, 2, "data.patch_size"},
      {{"training.lr=abc"}, 2, "training.lr"},
      {{"no_such.key=1"}, 2, "no_such.key"},
      {{"experiment.name=../x"}, 2, "experiment.name"},
      // Numbers beyond float32 (the model's type) used to fail at run time with exit 1.
      {{"training.lr=1e308"}, 2, "training.lr"},
      {{"training.min_lr=1e-300"}, 2, "training.min_lr"},
      {{"training.weight_decay=1e39"}, 2, "training.weight_decay"},
      {{"training=3"}, 2, "'training' is a section and cannot take a value"},
      // A batch that cannot fit in memory: named before anything is allocated (was a raw allocator line).
      {{"data.batch_size=1000000000"}, 2, "data.batch_size"},
  };
  config("table", {});
  for (const auto& row : rows) {
    std::vector<std::string> args = {"--config", "table.yaml"};
    for (const auto& s : row.sets) args.insert(args.end(), {"--set", s});
    const auto r = trainer(args);
    EXPECT_EQ(r.exit_code, row.exit_code) << row.sets[0] << ": " << r.output;
    EXPECT_TRUE(test::contains(r.output, row.names)) << row.sets[0] << ": " << r.output;
    EXPECT_EQ(error_lines(r.output), 1u) << row.sets[0] << ": " << r.output;
    expect_clean_failure(r);
    EXPECT_FALSE(fs::exists(run("table") / "checkpoints")) << row.sets[0];
  }
  // Forged dataset files: not HDF5, a truncated HDF5 file, a forged case id.
  test::write_text(dir / "text.h5", "not an hdf5 file\n");
  const std::string bytes = test::read_text(dir / "p.h5");
  test::write_text(dir / "truncated.h5", bytes.substr(0, bytes.size() / 3));
  fs::copy_file(dir / "p.h5", dir / "badid.h5");
  rename_case(dir / "badid.h5", DatasetReader(dir / "p.h5").split("train").front(), "x;y");
  for (const char* file : {"text.h5", "truncated.h5", "badid.h5"}) {
    const auto check = trainer({"check-data", file});
    EXPECT_EQ(check.exit_code, 1) << file << ": " << check.output;
    EXPECT_TRUE(test::contains(check.output, file)) << check.output;
    expect_clean_failure(check);
    const auto train = trainer({"--config", "table.yaml", "--set", std::string("data.path=") + file});
    EXPECT_EQ(train.exit_code, 1) << file << ": " << train.output;
    EXPECT_TRUE(test::contains(train.output, file)) << train.output;
    expect_clean_failure(train);
    EXPECT_FALSE(fs::exists(run("table") / "checkpoints" / "manifest.sha256")) << file;
  }
}

// Replaces every field (image, target, mask) of case `id` by a new, unwritten dataset of the same
// type whose spatial dims (the last three) are `spatial`, chunked by `chunk` when it is > 0, as a
// damaged file or another tool could write it.
void redeclare_case(const fs::path& file, const std::string& id, hsize_t spatial, hsize_t chunk) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const char* field : {"image", "target", "mask"}) {
    const std::string path = "cases/" + id + "/" + field;
    if (H5Lexists(f, path.c_str(), H5P_DEFAULT) <= 0) continue;
    const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
    const hid_t type = H5Dget_type(d);
    const hid_t space = H5Dget_space(d);
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    std::vector<hsize_t> chunks(dims.size(), 1);
    for (int a = rank - 3; a < rank; ++a) {
      dims[static_cast<size_t>(a)] = spatial;
      chunks[static_cast<size_t>(a)] = chunk;
    }
    H5Sclose(space);
    H5Dclose(d);
    ASSERT_GE(H5Ldelete(f, path.c_str(), H5P_DEFAULT), 0);
    const hid_t declared = H5Screate_simple(rank, dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk > 0) H5Pset_chunk(dcpl, rank, chunks.data());
    const hid_t nd = H5Dcreate2(f, path.c_str(), type, declared, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(nd, 0);
    H5Dclose(nd);
    H5Pclose(dcpl);
    H5Sclose(declared);
    H5Tclose(type);
  }
  H5Fclose(f);
}

// Every field of case `id` empty, of depth 0 (e.g. image (C, 0, 0, 0)).
void make_case_empty(const fs::path& file, const std::string& id) { redeclare_case(file, id, 0, 0); }

// Every field of case `id` declares `side`^3 voxels per channel with no chunk written (a few
// bytes on disk).
void declare_huge_case(const fs::path& file, const std::string& id, hsize_t side) {
  redeclare_case(file, id, side, 64);
}

// An empty volume is a check-data and preflight error naming the case (it used to pass, then
// training failed in torch.cat naming no case); a start that fails its preflight leaves no run
// folder behind (it used to create checkpoints/ and train.log).
TEST_F(Misuse, EmptyVolumesAreDataErrorsAndAFailedPreflightWritesNothing) {
  fs::copy_file(dir / "p.h5", dir / "empty.h5");
  const std::string victim = DatasetReader(dir / "p.h5").split("val").front();
  make_case_empty(dir / "empty.h5", victim);
  const std::string train = expect_check_and_run_refused("empty.h5", "empty", {victim, "holds no voxels"}, {victim});
  EXPECT_FALSE(fs::exists(run("empty") / "checkpoints")) << train;
  EXPECT_FALSE(fs::exists(run("empty") / "train.log")) << train;
  EXPECT_FALSE(fs::exists(run("empty"))) << "the lock's folder is removed when the start fails";
  // A folder that holds an earlier run keeps it (and its lock file).
  config("kept", {{"training.epochs", "1"}});
  ASSERT_EQ(trainer({"--config", "kept.yaml"}).exit_code, 0);
  const auto before = entries(run("kept"));
  const auto again = trainer({"--config", "kept.yaml", "--set", "data.path=empty.h5", "--resume"});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_EQ(entries(run("kept")), before);
}

// Declared sizes are checked against the memory available before anything is read: 5x2000^3 with
// unwritten chunks used to print a 21-frame stack trace, 5x100000^3 std::bad_alloc. Now a line
// naming the file, the case, the field and the declared shape (exit 1), and no run folder.
TEST_F(Misuse, DeclaredSizesBeyondMemoryAreRefusedBeforeReading) {
  const std::string victim = DatasetReader(dir / "p.h5").split("val").front();
  for (const hsize_t depth : {hsize_t{2000}, hsize_t{100000}}) {
    fs::copy_file(dir / "p.h5", dir / "huge.h5", fs::copy_options::overwrite_existing);
    declare_huge_case(dir / "huge.h5", victim, depth);
    const std::string declared = fmt::format("{}, {}, {}]", depth, depth, depth);
    const std::string train = expect_check_and_run_refused("huge.h5", "huge", {victim, declared, "memory available"},
                                                           {victim, "memory available"});
    // The preflight's list: one line per field of the case (image, target, mask), its count and
    // its verdict.
    EXPECT_LE(error_lines(train), 5u) << train;
    EXPECT_FALSE(fs::exists(run("huge"))) << train;
    // Without the preflight, the reader itself refuses the case: one line.
    const auto unchecked =
        trainer({"--config", "huge.yaml", "--set", "data.preflight=false", "--set", "experiment.name=unchecked"});
    EXPECT_EQ(unchecked.exit_code, 1) << unchecked.output;
    EXPECT_TRUE(test::contains(unchecked.output, victim)) << unchecked.output;
    EXPECT_TRUE(test::contains(unchecked.output, declared)) << unchecked.output;
    EXPECT_EQ(error_lines(unchecked.output), 1u) << unchecked.output;
    expect_clean_failure(unchecked);
  }
}

// Arguments that name a missing folder or a file for a folder, a negative label, an option without the one it goes
// with, or a folder for a checkpoint: usage errors (exit 2) naming the argument.
TEST_F(Misuse, MisusedArgumentsAreUsageErrorsNamingTheArgument) {
  struct Row {
    std::vector<std::string> args;
    std::string names;
  };
  fs::create_directories(dir / "refs");
  fs::create_directories(dir / "preds");
  const std::vector<Row> rows = {
      {{"import", "nnunet", "--source", "no_such_dataset", "--out", "n.h5"}, "no_such_dataset"},
      // A resampling that cannot fit in memory: named from the headers before anything is read in full.
      {{"import", "nnunet", "--source", "Dataset001_Phantom", "--out", "n.h5", "--spacing", "0.0001"}, "--spacing"},
      // A phantom that cannot fit in memory: named before anything is allocated (was std::bad_alloc).
      {{"synth", "--task", "dose", "--cases", "2", "--size", "100000", "--out", "huge.h5"}, "--size"},
      {{"import", "nifti", "--images", "no_such_images", "--out", "n.h5"}, "no_such_images"},
      {{"import", "openkbp", "--source", "no_such_openkbp", "--out", "n.h5"}, "no_such_openkbp"},
      {{"evaluate", "segmentation", "--reference", "refs", "--predictions", "preds", "--labels", "-5"}, "--labels"},
      // One prediction file where the folder of them belongs: said so, not "folder not found".
      {{"evaluate", "segmentation", "--reference", "refs", "--predictions", "a.yaml"},
       "evaluate segmentation: --predictions a.yaml: is a file; expected a folder"},
      {{"evaluate", "surface", "--reference", "a.yaml", "--predictions", "preds"}, "--reference a.yaml: is a file"},
      {{"--config", "a.yaml", "--checkpoint", "last"}, "--predict-only"},
  };
  ASSERT_EQ(trainer({"synth", "--task", "segmentation", "--cases", "2", "--size", "16", "--format", "nnunet", "--out",
                     "Dataset001_Phantom"})
                .exit_code,
            0);
  config("a", {{"training.epochs", "1"}});
  for (const auto& row : rows) {
    const auto r = trainer(row.args);
    EXPECT_EQ(r.exit_code, 2) << row.args[1] << ": " << r.output;
    EXPECT_TRUE(test::contains(r.output, row.names)) << r.output;
    EXPECT_EQ(error_lines(r.output), 1u) << r.output;
    expect_clean_failure(r);
  }
  EXPECT_FALSE(fs::exists(dir / "n.h5"));
  EXPECT_FALSE(fs::exists(dir / "preds" / "evaluation.csv"));
  EXPECT_FALSE(fs::exists(run("a"))) << "--checkpoint without --predict-only trained from scratch";
  // --resume with a folder: "is a folder", not "truncated or corrupt".
  ASSERT_EQ(trainer({"--config", "a.yaml"}).exit_code, 0);
  const auto resume = trainer({"--config", "a.yaml", "--resume", (run("a") / "checkpoints").string()});
  EXPECT_EQ(resume.exit_code, 2) << resume.output;
  EXPECT_TRUE(test::contains(resume.output, "is a folder, expected a checkpoint file")) << resume.output;
  expect_clean_failure(resume);
}

}  // namespace
}  // namespace u3d
