// The segmentation path through the real binary: nnU-Net raw folder -> import -> train (deep
// supervision, pseudo-Dice) -> predict (NIfTI with the input's header) -> evaluate; and predicting
// a large volume in bounded host memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <nifti2_io.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <sstream>

#include "nifti_support.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

using test::run_trainer;

std::string seg_config(const std::string& name, const std::string& dataset, int epochs = 2, int patch = 16) {
  std::ostringstream s;
  s << "experiment:\n  name: " << name << "\n  seed: 7\n"
    << "data:\n  path: " << dataset << "\n  batch_size: 2\n  patch_size: " << patch << "\n  normalize: [dataset]\n"
    << "  foreground_fraction: 0.33\n"
    << "model:\n  levels: 3\n  base_filters: 4\n  deep_supervision: true\n"
    << "training:\n  epochs: " << epochs << "\n  steps_per_epoch: 3\n  optimizer: sgd\n  lr: 0.01\n"
    << "  lr_schedule: poly\n  threads: 1\n  deterministic: true\n  device: cpu\n  val_patch_batches: 2\n"
    << "checkpoint:\n  monitor: pseudo_dice_ema\n"
    << "predict:\n  split: val\n  tta: flips\n"
    << "logging:\n  progress_seconds: 0\n";
  return s.str();
}

class SegmentationCli : public ::testing::Test {
 protected:
  void SetUp() override { raw = test::make_nnunet_raw(dir.path(), 4, shape, /*test_cases=*/1); }
  test::CommandResult trainer(std::vector<std::string> args) { return run_trainer(args, dir.path()); }
  const Shape3 shape{20, 24, 28};
  test::TempDir dir;
  fs::path raw;
};

TEST_F(SegmentationCli, ImportTrainPredictEvaluateKeepsTheInputGeometry) {
  auto r = trainer({"import", "nnunet", "--source", raw.string(), "--out", "d.h5", "--val-fraction", "0.25"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 train / 1 val / 1 test"), std::string::npos) << r.output;
  test::write_text(dir / "seg.yaml", seg_config("seg", "d.h5"));
  r = trainer({"--config", "seg.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto run = dir / "runs" / "seg";
  const auto rows = test::read_csv(run / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_FALSE(row.at("val_pseudo_dice").empty());
    EXPECT_FALSE(row.at("val_pseudo_dice_ema").empty());
  }
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "best.pt"));
  // A run resumed from epoch 1 continues the pseudo-Dice EMA exactly.
  test::write_text(dir / "seg2.yaml", seg_config("seg2", "d.h5"));
  r = trainer({"--config", "seg2.yaml", "--resume", (run / "checkpoints" / "epoch_0001.pt").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto resumed = test::read_csv(dir / "runs" / "seg2" / "metrics.csv");
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].at("val_pseudo_dice_ema"), rows[1].at("val_pseudo_dice_ema"));
  EXPECT_EQ(resumed[0].at("train_loss"), rows[1].at("train_loss"));
  // data.normalize = dataset became the importer's specs (CT statistics), kept with the run.
  EXPECT_NE(test::read_text(run / "config.yaml").find("normalize: [\"ct:"), std::string::npos);

  r = trainer({"--config", "seg.yaml", "--predict-only"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const DatasetReader data(dir / "d.h5");
  const std::string val = data.split("val").at(0);
  const auto nifti = run / "predictions" / "val" / (val + ".nii.gz");
  ASSERT_TRUE(fs::exists(nifti)) << r.output;
  test::expect_same_label_geometry(raw / "imagesTr" / (val + "_0000.nii.gz"), nifti);
  const auto labels = read_nifti(nifti).data;
  EXPECT_LE(labels.max().item<int>(), 2);
  EXPECT_TRUE(fs::exists(run / "predictions" / "val_metrics.csv"));

  // Cases without labels (imagesTs) predict too.
  r = trainer({"--config", "seg.yaml", "--predict-only", "--set", "predict.split=test"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::expect_same_label_geometry(raw / "imagesTs" / "case_004_0000.nii.gz",
                                   run / "predictions" / "test" / "case_004.nii.gz");

  const auto pred_dir = run / "predictions" / "val";
  // labelsTr holds the 3 training cases too: scoring the val case alone is asked for, never implied.
  r = trainer(
      {"evaluate", "segmentation", "--reference", (raw / "labelsTr").string(), "--predictions", pred_dir.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no prediction for 3 of the 4 reference cases"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(pred_dir / "evaluation.csv"));
  r = trainer({"evaluate", "segmentation", "--reference", (raw / "labelsTr").string(), "--predictions",
               pred_dir.string(), "--only-predicted"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("liver Dice / HD95 mm"), std::string::npos) << r.output;  // names from dataset.json
  const auto csv = test::read_csv(pred_dir / "evaluation.csv");
  ASSERT_EQ(csv.size(), 2u + 2u + 1u);  // 1 case x 2 labels, 2 label means, the overall mean
  EXPECT_EQ(csv[0].at("case"), val);
  EXPECT_EQ(csv[0].at("name"), "liver");
  EXPECT_EQ(csv.back().at("label"), "all");
  // Results are never overwritten silently.
  r = trainer({"evaluate", "segmentation", "--reference", (raw / "labelsTr").string(), "--predictions",
               pred_dir.string(), "--only-predicted"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos);
}

// Reads a float32 dataset of the predictions file.
torch::Tensor read_h5_float(const fs::path& file, const std::string& path, std::vector<int64_t> shape) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  torch::Tensor t = torch::full(shape, -1.0f);
  const herr_t rc = d >= 0 ? H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) : -1;
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  EXPECT_GE(rc, 0) << path;
  return t;
}

TEST_F(SegmentationCli, ResampledImportPredictsInTheOriginalGrid) {
  auto r = trainer({"import", "nnunet", "--source", raw.string(), "--out", "r.h5", "--spacing", "5,1.8,1.6"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const DatasetReader data(dir / "r.h5");
  const std::string val = data.split("val").at(0);
  EXPECT_EQ(data.case_shape(val), (Shape3{10, 12, 14}));
  test::write_text(dir / "r.yaml", seg_config("r", "r.h5", 1, /*patch=*/8));
  ASSERT_EQ(trainer({"--config", "r.yaml"}).exit_code, 0);
  r = trainer(
      {"--config", "r.yaml", "--predict-only", "--set", "predict.probabilities=true", "--set", "predict.tta=none"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto nifti = dir / "runs" / "r" / "predictions" / "val" / (val + ".nii.gz");
  test::expect_same_label_geometry(raw / "imagesTr" / (val + "_0000.nii.gz"), nifti);  // 28x24x20 again
  // Softmax probabilities in the dataset's grid: (K, D, H, W), summing to 1 per voxel.
  const auto p =
      read_h5_float(dir / "runs" / "r" / "predictions" / "val.h5", "cases/" + val + "/probabilities", {3, 10, 12, 14});
  EXPECT_TRUE(torch::allclose(p.sum(0), torch::ones({10, 12, 14}), 1e-5, 1e-5));
  EXPECT_GE(p.min().item<float>(), 0.0f);
}

TEST_F(SegmentationCli, BadCaseExitsOneNamingTheFileAndWritesNothing) {
  const auto f = raw / "labelsTr" / "case_002.nii.gz";
  auto labels = std::get<1>(test::nnunet_raw_case(2, shape)).clone();
  labels[1][2][3] = 7;
  test::TestNifti v = test::oblique(labels);
  v.qoffset[0] += 2;
  v.srow[3] += 2;
  test::write_test_nifti(f, v);
  const auto r = trainer({"import", "nnunet", "--source", raw.string(), "--out", "d.h5"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(f.string() + ": label values 7 are not declared"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "d.h5"));
  EXPECT_EQ(trainer({"import", "nnunet", "--source", (dir / "nowhere").string(), "--out", "d.h5"}).exit_code,
            2);                                                            // usage error
  EXPECT_EQ(trainer({"import", "nnunet", "--out", "d.h5"}).exit_code, 2);  // --source missing
}

// ---------------------------------------------------------------------------------------------
// Runs the trainer and returns its exit code and peak resident memory (bytes) from wait4.
std::pair<int, int64_t> run_measured(const std::vector<std::string>& args, const fs::path& cwd) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    const int null = ::open("/dev/null", O_WRONLY);
    if (!std::getenv("U3D_TEST_VERBOSE")) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    std::vector<std::string> all = {test::trainer_path().string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, static_cast<int64_t>(usage.ru_maxrss) * 1024};
}

TEST(SegmentationMemory, LargeVolumePredictsInBoundedHostMemory) {
  test::TempDir dir;
  constexpr int64_t kClasses = 8;
  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.channel_names = {"image"};
  info.num_classes = kClasses;
  {  // a tiny training set: the network only has to exist
    DatasetWriter w(dir / "small.h5", info);
    for (int i = 0; i < 2; ++i) {
      CaseData c;
      c.id = fmt::format("c{}", i);
      c.image = torch::randn({1, 16, 16, 16});
      c.target = torch::randint(0, kClasses, {16, 16, 16}, torch::kUInt8);
      w.write_case(c);
    }
    w.set_split("train", {"c0", "c1"});
    w.commit();
  }
  // One large case (96 x 384 x 384 = 14.2 M voxels) with a NIfTI geometry, and one small one for
  // the baseline; the same code path, so the difference is what the volume costs.
  auto write_case = [&](const std::string& file, const Shape3& s) {
    DatasetWriter w(dir / file, info);
    CaseData c;
    c.id = "big";
    c.image = torch::zeros({1, s[0], s[1], s[2]});
    c.source = plain_geometry(s, {1.0, 0.8, 0.8});
    w.write_case(c);
    w.set_split("val", {"big"});
    w.commit();
  };
  const Shape3 big{96, 384, 384};
  write_case("big.h5", big);
  write_case("little.h5", {96, 32, 32});
  test::write_text(dir / "m.yaml",
                   "experiment:\n  name: m\ndata:\n  path: small.h5\n  val_split: \"\"\n  batch_size: 2\n"
                   "  patch_size: 16\nmodel:\n  levels: 2\n  base_filters: 2\n"
                   "training:\n  epochs: 1\n  steps_per_epoch: 1\n  threads: 1\n  device: cpu\n"
                   "predict:\n  overlap: 0\n  batch_size: 64\nlogging:\n  progress_seconds: 0\n");
  ASSERT_EQ(run_trainer({"--config", "m.yaml"}, dir.path()).exit_code, 0);
  const auto [rc_small, rss_small] =
      run_measured({"--config", "m.yaml", "--predict-only", "--set", "data.path=little.h5"}, dir.path());
  ASSERT_EQ(rc_small, 0);
  const auto [rc_big, rss_big] =
      run_measured({"--config", "m.yaml", "--predict-only", "--set", "data.path=big.h5"}, dir.path());
  ASSERT_EQ(rc_big, 0);
  const auto written = read_nifti(dir / "runs" / "m" / "predictions" / "val" / "big.nii.gz");
  EXPECT_EQ(written.data.sizes(), (torch::IntArrayRef{96, 384, 384}));
  // Blending into whole-volume logits needs K * V * 4 bytes (453 MB here) for the sum and as much
  // again for the normalised result; the streamed prediction holds the input (57 MB) and a rolling
  // buffer of a patch depth of rows (75 MB), less than one whole-volume logits tensor.
  const double voxels = static_cast<double>(big[0] * big[1] * big[2]);
  const double full_logits = kClasses * voxels * 4;
  const double extra = static_cast<double>(rss_big - rss_small);
  RecordProperty("extra_peak_rss_mb", std::to_string(extra / 1e6));
  EXPECT_LT(extra, full_logits) << "peak RSS " << rss_big / 1e6 << " MB vs " << rss_small / 1e6
                                << " MB for the small volume";
}

}  // namespace
}  // namespace u3d
