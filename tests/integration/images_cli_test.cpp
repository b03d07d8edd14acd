// `trainer import images` through the real binary on slices written by Pillow and tifffile
// (tests/python/write_slices.py): patients become cases of stacked slices in natural order, masks
// map to labels, splits are per patient, and bad input ends with one error line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "test_support.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/images/image2d.h"

namespace u3d {
namespace {

class ImagesCli : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = test::torch_python();
    if (!python_) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // write_slices.py <dir>/<out> [extra...]; fails the test when the writer fails.
  void write(const std::string& out, const std::string& extra) {
    const std::string cmd = python_->string() + " " + (test::source_dir() / "tests/python/write_slices.py").string() +
                            " " + (dir / out).string() + " " + extra + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // Exit code, one "[error]" line holding `needle`, and no dataset file.
  void expect_error(const test::CommandResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    const size_t line = r.output.find("[error]");
    ASSERT_NE(line, std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[error]", line + 1), std::string::npos) << "more than one error line: " << r.output;
    EXPECT_NE(r.output.find(needle, line), std::string::npos) << r.output;  // on the error line
    EXPECT_FALSE(fs::exists(dir / "x.h5"));
  }
  std::optional<fs::path> python_;
  test::TempDir dir;
};

TEST_F(ImagesCli, PngPatientsBecomeCasesOfSlicesInNaturalOrder) {
  write("lgg", "--patients 5 --slices 12 --size 48");
  const auto r = trainer({"import", "images", "--images", "lgg/images", "--out", "x.h5", "--val-fraction", "0.2",
                          "--test-fraction", "0.2", "--reference-out", "ref"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mask values {0, 255} -> labels 0 background, 1 foreground"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("60 slices in 5 cases, 3 train / 1 val / 1 test"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().num_classes, 2);
  ASSERT_EQ(data.info().case_ids.size(), 5u);
  EXPECT_EQ(data.info().case_ids[0], "TCGA_XX_4900_19960909");
  std::set<std::string> seen;
  for (const char* split : {"train", "val", "test"}) {
    for (const auto& id : data.split(split)) EXPECT_TRUE(seen.insert(id).second) << id << " in two splits";
  }
  EXPECT_EQ(seen.size(), 5u);
  const CaseData c = data.read_case("TCGA_XX_4902_19960909");
  ASSERT_EQ(c.image.sizes(), (std::vector<int64_t>{1, 12, 48, 48}));
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(c.image[0][k][0][0].item<int64_t>(), k + 1) << "slice " << k;
  EXPECT_EQ(std::get<0>(at::_unique(c.target)).numel(), 2);
  EXPECT_EQ(c.target.max().item<int64_t>(), 1);
  // The source files, slice by slice, for per-slice prediction masks.
  ASSERT_TRUE(c.source.has_value());
  EXPECT_EQ(c.source->format, "slices");
  ASSERT_EQ(c.source->files.size(), 24u);
  EXPECT_EQ(fs::path(c.source->files[9]).filename(), "TCGA_XX_4902_19960909_10.png");
  EXPECT_EQ(fs::path(c.source->files[12]).filename(), "TCGA_XX_4902_19960909_1_mask.png");
  // The mask as Pillow wrote it: 255 where the label is 1.
  const Image2d m = read_image2d(dir / "lgg/images/TCGA_XX_4902_19960909_3_mask.png");
  EXPECT_TRUE(torch::equal(m.pixels.eq(255).to(torch::kUInt8), c.target[2]));
  EXPECT_TRUE(fs::exists(dir / "ref" / "TCGA_XX_4902_19960909.tif"));
}

TEST_F(ImagesCli, SixteenBitTiffWithALabelsFolderAndThreeClasses) {
  write("t", "--patients 2 --slices 3 --size 32 --format tiff16 --labels-dir --classes 3");
  const auto r = trainer(
      {"import", "images", "--images", "t/images", "--labels", "t/labels", "--out", "x.h5", "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mask values {0, 1, 2} are the labels (classes 0..2)"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().num_classes, 3);
  const CaseData c = data.read_case("TCGA_XX_4901_19960909");
  ASSERT_EQ(c.image.sizes(), (std::vector<int64_t>{1, 3, 32, 32}));
  EXPECT_EQ(c.image[0][1][0][0].item<int64_t>(), 200);  // slice 2, x 100
  EXPECT_GT(c.image.max().item<int64_t>(), 255);
  EXPECT_EQ(c.target.max().item<int64_t>(), 2);
}

TEST_F(ImagesCli, ColourImagesAreConvertedToGreyWithOneLine) {
  write("c", "--patients 2 --slices 2 --size 32 --format rgb");
  const auto r = trainer({"import", "images", "--images", "c/images", "--out", "x.h5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 colour image(s) converted to grey"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.read_case("TCGA_XX_4900_19960909").image[0][1][0][0].item<int64_t>(), 2);  // grey stays grey
}

TEST_F(ImagesCli, GroupRegexNamesTheCases) {
  write("g", "--patients 2 --slices 3 --size 32");
  auto r = trainer({"import", "images", "--images", "g/images", "--out", "x.h5", "--group", "^TCGA_XX_([0-9]+)_"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().case_ids, (std::vector<std::string>{"4900", "4901"}));
  EXPECT_EQ(data.case_shape("4900")[0], 3);
}

TEST_F(ImagesCli, BadInputEndsWithOneLine) {
  write("b", "--patients 2 --slices 3 --size 32");
  // The command line: exit 2.
  expect_error(trainer({"import", "images", "--images", "nowhere", "--out", "x.h5"}), 2, "--images nowhere");
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--group", "TCGA_(XX)_([0-9]+)"}),
               2, "expected one capture group");
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--group", "(unclosed"}), 2,
               "not a regular expression");
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--val-fraction", "0.5",
                        "--test-fraction", "0.5"}),
               2, "--test-fraction");
  // The files: exit 1, naming them.
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--group", "^(nomatch)"}), 1,
               "does not match the name 'TCGA_XX_4900_19960909_1'");
  fs::remove(dir / "b/images/TCGA_XX_4901_19960909_2_mask.png");
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5"}), 1,
               "TCGA_XX_4901_19960909_2.png (no mask TCGA_XX_4901_19960909_2_mask.png)");
  auto r = trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--skip-unpaired"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("left out 1 unpaired file(s)"), std::string::npos) << r.output;
  EXPECT_EQ(DatasetReader(dir / "x.h5").case_shape("TCGA_XX_4901_19960909")[0], 2);
  fs::remove(dir / "x.h5");
  // A slice of another size in one patient: both files named.
  write_png_gray8(dir / "b/images/TCGA_XX_4900_19960909_3.png", torch::zeros({16, 32}, torch::kUInt8));
  write_png_gray8(dir / "b/images/TCGA_XX_4900_19960909_3_mask.png", torch::zeros({16, 32}, torch::kUInt8));
  expect_error(
      trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--skip-unpaired"}), 1,
      "b/images/TCGA_XX_4900_19960909_3.png is 16x32 but b/images/TCGA_XX_4900_19960909_1.png of the same case "
      "'TCGA_XX_4900_19960909' is 32x32");
  // The same failure with --reference-out: the other patients' volumes were written (staged), none is
  // left in the folder or beside it.
  const auto failed = trainer(
      {"import", "images", "--images", "b/images", "--out", "x.h5", "--skip-unpaired", "--reference-out", "ref"});
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_TRUE(!fs::exists(dir / "ref") || fs::is_empty(dir / "ref")) << "a failed import wrote reference volumes";
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_NE(e.path().filename().string().rfind(".ref.", 0), 0u) << "staged folder left: " << e.path();
  }
  // Mask values neither {0, 255} nor 0..K.
  torch::Tensor bad = torch::zeros({16, 32}, torch::kUInt8);
  bad[0][0] = 1;
  bad[0][1] = 255;
  write_png_gray8(dir / "b/images/TCGA_XX_4900_19960909_3_mask.png", bad);
  expect_error(trainer({"import", "images", "--images", "b/images", "--out", "x.h5", "--skip-unpaired"}), 1,
               "the masks hold the values {0, 1, 255}; expected {0, 255} (binary) or 0..K");
}

}  // namespace
}  // namespace u3d
