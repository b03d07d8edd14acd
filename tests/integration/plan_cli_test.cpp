// `trainer plan` end to end: a phantom dataset in, a commented YAML out that trains as is (a few
// CPU steps); the fingerprint is kept beside the data; outputs are never clobbered silently.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "expectations.h"
#include "test_support.h"
#include "u3d/core/parallel.h"
#include "u3d/core/thread_budget.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

class PlanCli : public ::testing::Test {
 protected:
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // Plans `data` into `yaml` and trains the planned config as written for two CPU steps (only made
  // small enough for a test machine); the YAML's text.
  std::string plan_and_train(const std::string& data, const std::string& yaml) {
    auto r = trainer({"plan", data, "--gpu-memory", "8", "--out", yaml});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"--config", yaml, "--set", "training.epochs=1", "--set", "training.steps_per_epoch=2", "--set",
                 "training.val_patch_batches=1", "--set", "training.device=cpu", "--set", "training.threads=1", "--set",
                 "model.base_filters=4", "--set", "model.max_filters=16", "--set", "logging.progress_seconds=0"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return test::read_text(dir / yaml);
  }
  test::TempDir dir;
};

TEST_F(PlanCli, PlannedConfigTrainsAsIsAndOutputsAreNotClobbered) {
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 8, 16);
  auto r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "median shape")) << r.output;            // the fingerprint table
  EXPECT_TRUE(test::contains(r.output, " GiB of 8 GiB (budget)")) << r.output;  // in the unit of --gpu-memory
  EXPECT_TRUE(fs::exists(dir / "seg.h5.fingerprint.json"));
  const std::string yaml = test::read_text(dir / "seg.yaml");
  EXPECT_TRUE(test::contains(yaml, "patch_size: [16, 16, 16]")) << yaml;
  EXPECT_TRUE(test::contains(yaml, "# ")) << "every choice carries its reason";
  // As written, only shortened (steps) and made small enough for a test machine.
  r = trainer({"--config", "seg.yaml", "--set", "training.epochs=1", "--set", "training.steps_per_epoch=2", "--set",
               "training.val_patch_batches=1", "--set", "training.device=cpu", "--set", "training.threads=1", "--set",
               "model.base_filters=4", "--set", "model.max_filters=16", "--set", "logging.progress_seconds=0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs" / "seg" / "checkpoints" / "epoch_0001.pt"));

  // A second plan reuses the fingerprint and refuses to replace the YAML without --force.
  test::expect_exit(trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"}), 2,
                    "seg.yaml exists; pass --force");
  EXPECT_EQ(test::read_text(dir / "seg.yaml"), yaml);
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "read from")) << r.output;

  // Bad input: one line, exit 2.
  test::expect_exit(trainer({"plan", "missing.h5"}), 2, "missing.h5: no such dataset file");
  test::expect_exit(trainer({"plan", "seg.h5", "--device", "tpu"}), 2);
  test::expect_exit(trainer({"plan", "seg.h5", "--task", "dose", "--out", "d.yaml"}), 2);
  EXPECT_FALSE(fs::exists(dir / "d.yaml"));
}

// Issue 35: the surface workflow (ignore label 2, unlabelled test cases) and 2-D images stored as
// volumes one voxel deep are planned, and the planned configs train as written.
TEST_F(PlanCli, IgnoreLabelAndOneVoxelDeepDatasetsArePlannedAndTrain) {
  auto r = trainer({"synth", "--task", "surface", "--format", "nnunet", "--cases", "6", "--size", "16",
                    "--test-fraction", "0.34", "--out", "raw"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"import", "nnunet", "--source", "raw", "--out", "surface.h5"});  // imagesTs: unlabelled cases
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string yaml = plan_and_train("surface.h5", "surface.yaml");
  EXPECT_TRUE(test::contains(yaml, "ignore label    2")) << yaml;
  // The test split's two unlabelled cases are never read by the plan (issue 54): 4 cases.
  EXPECT_TRUE(test::contains(yaml, "cases           4 (train 3, val 1)")) << yaml;
  EXPECT_FALSE(test::contains(yaml, "unlabelled")) << yaml;
  EXPECT_TRUE(fs::exists(dir / "runs" / "surface" / "checkpoints" / "epoch_0001.pt"));

  // 2-D images (one TIFF page each): a disc of label 1 on noise, imported as volumes 1 x 32 x 32.
  for (const char* sub : {"images", "labels"}) fs::create_directories(dir / "flat" / sub);
  for (int64_t i = 0; i < 6; ++i) {
    const torch::Tensor yy = torch::arange(32).view({1, 32, 1}), xx = torch::arange(32).view({1, 1, 32});
    const torch::Tensor label = ((yy - 16) * (yy - 16) + (xx - 16) * (xx - 16) < (6 + i) * (6 + i)).to(torch::kUInt8);
    write_tiff_volume(dir / "flat" / "images" / fmt::format("c{}.tif", i),
                      100 * label.to(torch::kFloat) + torch::rand({1, 32, 32}));
    write_tiff_volume(dir / "flat" / "labels" / fmt::format("c{}.tif", i), label);
  }
  r = trainer({"import", "tiff", "--images", "flat/images", "--labels", "flat/labels", "--out", "flat.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  yaml = plan_and_train("flat.h5", "flat.yaml");
  EXPECT_TRUE(test::contains(yaml, "patch_size: [1, 32, 32]")) << yaml;
  // nnU-Net's topology: the one-voxel axis is never down-sampled, the in-plane ones are (issue 39).
  EXPECT_TRUE(test::contains(yaml, "levels: 4")) << yaml;
  EXPECT_TRUE(test::contains(yaml, "strides: [[1, 1, 1], [1, 2, 2], [1, 2, 2], [1, 2, 2]]")) << yaml;
  EXPECT_TRUE(fs::exists(dir / "runs" / "flat" / "checkpoints" / "epoch_0001.pt"));
}

// Issue 35: the run name is checked by the config's own rule (or made from the file name), and the
// YAML never replaces the dataset or its fingerprint, --force or not, through a link or not.
TEST_F(PlanCli, NameIsARunNameAndTheOutputIsNeverAnInput) {
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 6, 16);
  const std::string data = test::read_text(dir / "seg.h5");
  auto r = trainer({"plan", "seg.h5", "--name", "../evil", "--out", "evil.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "plan: --name: experiment.name: \"../evil\" is not allowed; may hold only"))
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "evil.yaml"));

  fs::copy_file(dir / "seg.h5", dir / "my scan \xC3\xBC.h5");
  r = trainer({"plan", "my scan \xC3\xBC.h5", "--out", "scan.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(test::read_text(dir / "scan.yaml"), "name: \"my_scan_\""))
      << test::read_text(dir / "scan.yaml");

  // A line break in the file name stays inside the YAML's comments and string; bytes that are not
  // UTF-8 cannot be a YAML string: refused, not replaced.
  fs::copy_file(dir / "seg.h5", dir / "two\nlines.h5");
  r = trainer({"plan", "two\nlines.h5", "--out", "two.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(test::read_text(dir / "two.yaml"), "name: \"two_lines\""))
      << test::read_text(dir / "two.yaml");
  EXPECT_TRUE(test::contains(test::read_text(dir / "two.yaml"), "`trainer plan \"two\\nlines.h5\"`"));
  fs::copy_file(dir / "seg.h5", dir / "latin\xFC.h5");
  r = trainer({"plan", "latin\xFC.h5", "--out", "latin.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "the path is not UTF-8 text")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "latin.yaml"));

  fs::create_symlink("seg.h5", dir / "link.h5");
  for (const std::string out : {"seg.h5", "link.h5", "seg.h5.fingerprint.json", "./seg.h5"}) {
    r = trainer({"plan", "seg.h5", "--out", out, "--force"});
    EXPECT_EQ(r.exit_code, 2) << out << ": " << r.output;
    EXPECT_TRUE(test::contains(r.output, "plan: --out " + out + " is the input")) << r.output;
  }
  EXPECT_TRUE(test::read_text(dir / "seg.h5") == data) << "seg.h5 changed";
  fs::create_directories(dir / "folder.yaml");
  r = trainer({"plan", "seg.h5", "--out", "folder.yaml", "--force"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "plan: --out folder.yaml is a folder; give the YAML file to write")) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir / "link.h5"));
}

// The same promise for the importers, whose inputs are files in folders: --out may name any file
// but one the import reads (here: after a first import, --force replaces that dataset as before).
TEST_F(PlanCli, ImportsNeverReplaceAFileTheyRead) {
  auto r =
      trainer({"synth", "--task", "segmentation", "--format", "tiff", "--cases", "3", "--size", "8", "--out", "tif"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"synth", "--task", "segmentation", "--format", "nnunet", "--cases", "3", "--size", "8", "--out", "raw"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string image = test::read_text(dir / "tif" / "images" / "case_000.tif");
  const std::string label = test::read_text(dir / "raw" / "labelsTr" / "case_001.nii.gz");
  r = trainer({"import", "tiff", "--images", "tif/images", "--labels", "tif/labels", "--out", "tif/images/case_000.tif",
               "--force"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "import tiff: --out tif/images/case_000.tif is the input")) << r.output;
  r = trainer({"import", "nnunet", "--source", "raw", "--out", "raw/labelsTr/../labelsTr/case_001.nii.gz", "--force"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "is the input raw/labelsTr/case_001.nii.gz")) << r.output;
  EXPECT_TRUE(test::read_text(dir / "tif" / "images" / "case_000.tif") == image) << "an input image changed";
  EXPECT_TRUE(test::read_text(dir / "raw" / "labelsTr" / "case_001.nii.gz") == label) << "an input label changed";
  for (int pass = 0; pass < 2; ++pass) {  // an earlier output is replaced with --force
    r = trainer(
        {"import", "tiff", "--images", "tif/images", "--labels", "tif/labels", "--out", "tif/images/d.h5", "--force"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
}

// `--split` fingerprints the named splits' cases only (and stores nothing: the kept fingerprint
// covers every case); a split the file lacks is a usage mistake naming --split.
TEST_F(PlanCli, SplitFingerprintsOnlyTheNamedSplits) {
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 8, 16);  // 6 train, 2 val
  auto r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "val.yaml", "--split", "val"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "split(s) val (2 cases; not stored")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "cases           2 ")) << r.output;  // the fingerprint table
  EXPECT_FALSE(fs::exists(dir / "seg.h5.fingerprint.json"));
  EXPECT_TRUE(fs::exists(dir / "val.yaml"));
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "both.yaml", "--split", "train,val,val"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "(8 cases; not stored")) << r.output;
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "none.yaml", "--split", "nope"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "--split")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "nope")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "none.yaml"));
}

// Issue 37: the 2d configuration beside 3d_fullres trains as written; the start banner states how
// the CPU threads are shared (core/thread_budget.h).
TEST_F(PlanCli, WritesThe2dConfigWhichTrainsAndTheBannerSharesTheCores) {
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 8, 16);
  auto r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::contains(r.output, "plan: 2d patch 1x16x16 (slices across axis 0)")) << r.output;
  EXPECT_TRUE(test::contains(r.output, "plan: prefers 3d_fullres")) << r.output;  // isotropic phantoms
  ASSERT_TRUE(fs::exists(dir / "seg_2d.yaml"));
  const std::string yaml = test::read_text(dir / "seg_2d.yaml");
  EXPECT_TRUE(test::contains(yaml, "patch_size: [1, 16, 16]")) << yaml;
  EXPECT_TRUE(test::contains(yaml, "kernel_sizes: [[1, 3, 3], [1, 3, 3], [1, 3, 3]]")) << yaml;
  EXPECT_TRUE(test::contains(yaml, "strides: [[1, 1, 1], [1, 2, 2], [1, 2, 2]]")) << yaml;
  EXPECT_TRUE(test::contains(yaml, "max_filters: 512")) << yaml;
  EXPECT_TRUE(test::contains(test::read_text(dir / "seg.yaml"), "also wrote a 2d plan")) << "the 3D plan names it";

  // As written, only shortened and made small; the banner states the default thread split.
  r = trainer({"--config", "seg_2d.yaml", "--set", "training.epochs=1", "--set", "training.steps_per_epoch=2", "--set",
               "training.val_patch_batches=1", "--set", "training.device=cpu", "--set", "model.base_filters=4", "--set",
               "model.max_filters=16", "--set", "logging.progress_seconds=0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "runs" / "seg_2d" / "checkpoints" / "epoch_0001.pt"));
  EXPECT_TRUE(test::contains(r.output, split_threads(core_count(), 0, 0, false).line())) << r.output;
  EXPECT_FALSE(test::contains(r.output, "oversubscribed")) << r.output;

  // A second plan refuses to replace the 2d YAML without --force.
  fs::remove(dir / "seg.yaml");
  r = trainer({"plan", "seg.h5", "--gpu-memory", "8", "--out", "seg.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(test::contains(r.output, "seg_2d.yaml exists; pass --force")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "seg.yaml"));
}

}  // namespace
}  // namespace u3d
