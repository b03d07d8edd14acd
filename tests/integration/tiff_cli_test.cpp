// `trainer synth --format tiff` and `trainer import tiff` through the real binary: phantom folders of
// 3D TIFF volumes become a dataset file (ignore label recorded); bad input ends with one error line,
// exit 2 for the command line and 1 for a file, and no output file.
#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/synth.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

class TiffCli : public ::testing::Test {
 protected:
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // Exit code, one "[error]" line holding `needle`, and no dataset file.
  void expect_error(const test::CommandResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    size_t errors = 0;
    for (size_t p = r.output.find("[error]"); p != std::string::npos; p = r.output.find("[error]", p + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.output;
    EXPECT_FALSE(fs::exists(dir / "x.h5"));
  }
  test::TempDir dir;
};

TEST_F(TiffCli, SynthFoldersImportIntoADataset) {
  auto r = trainer(
      {"synth", "--task", "segmentation", "--cases", "3", "--size", "16", "--format", "tiff", "--out", "phantom"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* folder : {"images", "labels"}) {
    for (const char* id : {"case_000", "case_001", "case_002"}) {
      EXPECT_TRUE(fs::exists(dir / "phantom" / folder / (std::string(id) + ".tif"))) << folder << "/" << id;
    }
  }
  r = trainer({"import", "tiff", "--images", "phantom/images", "--labels", "phantom/labels", "--out", "x.h5",
               "--val-fraction", "0.34", "--spacing", "2,1,1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 train / 1 val / 0 test"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().task, Task::kSegmentation);
  EXPECT_EQ(data.info().num_classes, 4);  // the organ phantom: background, liver, kidney, tumour
  EXPECT_EQ(data.info().ignore_label, -1);
  ASSERT_EQ(data.info().case_ids.size(), 3u);
  const CaseData made = make_phantom_case(Task::kSegmentation, {16, 16, 16}, /*seed=*/0, /*index=*/1);
  const CaseData read = data.read_case("case_001");
  EXPECT_TRUE(torch::equal(read.image, made.image));
  EXPECT_TRUE(torch::equal(read.target, made.target));
  EXPECT_EQ(read.spacing, (std::array<double, 3>{2.0, 1.0, 1.0}));
}

TEST_F(TiffCli, RecordsTheIgnoreLabel) {
  fs::create_directories(dir / "img");
  fs::create_directories(dir / "lab");
  for (const std::string id : {"a", "b"}) {
    write_tiff_volume(dir / "img" / (id + ".tif"), torch::rand({8, 12, 12}));
    torch::Tensor l = torch::zeros({8, 12, 12}, torch::kUInt8);
    l.select(1, 5).fill_(1);
    l.narrow(0, 0, 3).fill_(2);  // unlabeled
    write_tiff_volume(dir / "lab" / (id + ".tif"), l);
  }
  const auto r =
      trainer({"import", "tiff", "--images", "img", "--labels", "lab", "--out", "x.h5", "--ignore-label", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().ignore_label, 2);
  EXPECT_EQ(data.info().num_classes, 2);
  EXPECT_TRUE(data.read_case("a").target.eq(2).any().item<bool>());
}

TEST_F(TiffCli, BadInputEndsWithOneLine) {
  // The command line: exit 2.
  expect_error(trainer({"import", "tiff", "--images", "nowhere", "--out", "x.h5"}), 2, "--images nowhere");
  fs::create_directories(dir / "img");
  fs::create_directories(dir / "lab");
  expect_error(
      trainer({"import", "tiff", "--images", "img", "--labels", "lab", "--out", "x.h5", "--ignore-label", "0"}), 2,
      "--ignore-label 0");
  // A file: exit 1, naming it.
  write_tiff_volume(dir / "img" / "a.tif", torch::rand({4, 8, 8}));
  write_tiff_volume(dir / "lab" / "a.tif", torch::zeros({4, 8, 8}, torch::kUInt8));
  std::ofstream(dir / "img" / "b.tif") << "not a TIFF file";
  std::ofstream(dir / "lab" / "b.tif") << "not a TIFF file";
  expect_error(trainer({"import", "tiff", "--images", "img", "--labels", "lab", "--out", "x.h5"}), 1, "b.tif");
  // An image without a label: exit 1, naming it.
  fs::remove(dir / "lab" / "b.tif");
  expect_error(trainer({"import", "tiff", "--images", "img", "--labels", "lab", "--out", "x.h5"}), 1,
               "b.tif (no label)");
}

}  // namespace
}  // namespace u3d
