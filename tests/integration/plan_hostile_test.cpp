// A hostile pass over `trainer plan` and `trainer cascade` (issue 54) on nnU-Net raw datasets written
// by nibabel (tests/python/write_hostile_nnunet.py): one case, labels of background only, a class no
// training case holds, 10 x 0.5 x 0.5 mm voxels; a cascade on a dose dataset or without its first
// stage. Each is planned as a careful reader would, says what it cannot learn, or is refused in one
// line with nothing written.
#include <gtest/gtest.h>

#include <cstdlib>

#include "expectations.h"
#include "python_input.h"
#include "test_support.h"

namespace u3d {
namespace {

class PlanHostile : public test::PythonInputTest {
 protected:
  PlanHostile() : PythonInputTest("write_hostile_nnunet.py", "raw") {}
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
};

TEST_F(PlanHostile, OddDatasetsArePlannedAndSayWhatCannotBeLearnt) {
  struct Row {
    std::string name;
    std::vector<std::string> expected;  // in the plan's output
    std::string absent;                 // never in the plan's output ("" none)
  };
  const std::vector<Row> rows{
      {"one", {"cases           1 (train 1)", "plan: prefers 3d_fullres"}, "have no voxel"},
      {"background",
       {"plan: 2 of 2 foreground class(es) have no voxel in the 3 planning case(s) (test cases are never read): "
        "'organ' (1), 'tumour' (2); a network trained on them cannot learn anything but background"},
       ""},
      // tumour is in no training label; the two test cases are never read.
      {"testonly",
       {"plan: 1 of 2 foreground class(es) have no voxel in the 3 planning case(s) (test cases are never read): "
        "'tumour' (2); a network trained on them cannot learn those classes"},
       ""},
      // 10 mm between slices, 0.5 mm in plane, as many slices as rows: before, "near-isotropic spacing".
      {"aniso",
       {"median 10 x 0.5 x 0.5 mm", "kernel_sizes: [[1, 3, 3]",
        "plan: prefers 2d: anisotropic spacing (axis 0 coarser than 3x the finest"},
       "near-isotropic"},
  };
  for (const auto& row : rows) {
    auto r = trainer(
        {"import", "nnunet", "--source", "raw/" + row.name, "--out", row.name + ".h5", "--val-fraction", "0.25"});
    ASSERT_EQ(r.exit_code, 0) << row.name << "\n" << r.output;
    r = trainer({"plan", row.name + ".h5", "--gpu-memory", "8", "--out", row.name + ".yaml"});
    ASSERT_EQ(r.exit_code, 0) << row.name << "\n" << r.output;
    const std::string text = r.output + test::read_text(dir / (row.name + ".yaml"));
    for (const auto& e : row.expected) EXPECT_TRUE(test::contains(text, e)) << row.name << ": " << e << "\n" << text;
    if (!row.absent.empty()) EXPECT_FALSE(test::contains(text, row.absent)) << row.name << "\n" << text;
  }
  // The one-case plan trains as written (no validation split: one case cannot be split).
  const auto r =
      trainer({"--config", "one.yaml", "--set", "training.epochs=1", "--set", "training.steps_per_epoch=1", "--set",
               "training.device=cpu", "--set", "training.threads=1", "--set", "model.base_filters=4", "--set",
               "model.max_filters=8", "--set", "logging.progress_seconds=0"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// `trainer cascade` on a dose dataset, or without a first stage: exit 2, one line, nothing written;
// a dose plan's 3d_lowres YAML does not call itself the cascade's first stage (before: it did, and
// told the user to import the dose data with `trainer import nnunet`).
TEST_F(PlanHostile, DoseDatasetsAndMissingFirstStagesMakeNoCascade) {
  test::make_phantom(dir / "dose.h5", Task::kDose, 4, 48);
  auto plan = trainer({"plan", "dose.h5", "--memory-model", "nnunet", "--gpu-memory", "0.02", "--out", "dose.yaml"});
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_FALSE(fs::exists(dir / "dose_cascade.yaml"));
  const std::string lowres = test::read_text(dir / "dose_lowres.yaml");
  EXPECT_TRUE(test::contains(lowres, "A dose run trains it on its own: nnU-Net's cascade")) << lowres;
  EXPECT_FALSE(test::contains(lowres, "cascade's first stage")) << lowres;
  EXPECT_FALSE(test::contains(lowres, "import nnunet")) << lowres;
  fs::create_directories(dir / "runs/empty_lowres");
  struct Row {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Row> rows{
      {{"--previous", "runs/none", "--data", "dose.h5"}, "cascade: --previous runs/none: folder not found"},
      {{"--previous", "runs/empty_lowres", "--data", "dose.h5"},
       "cascade: dose.h5 is a dose dataset; the cascade is nnU-Net's segmentation configuration"},
  };
  for (const auto& row : rows) {
    std::vector<std::string> args{"cascade"};
    args.insert(args.end(), row.args.begin(), row.args.end());
    args.insert(args.end(), {"--out", "c.h5"});
    const auto r = trainer(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(test::contains(r.output, row.needle)) << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << "one error line: " << r.output;
    EXPECT_FALSE(fs::exists(dir / "c.h5"));
  }
}

}  // namespace
}  // namespace u3d
