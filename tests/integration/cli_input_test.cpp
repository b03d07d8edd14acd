// Hostile but fair input through the trainer binary (issue 35, second round): every numeric option
// answers out-of-range and nonsense values with one range message (exit 2); a missing split is a
// usage error; a config is one regular, small YAML document; a newline in a path stays in the one
// line; folder outputs replace the whole folder.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <sstream>

#include "test_support.h"

namespace u3d {
namespace {

class CliInput : public ::testing::Test {
 protected:
  void SetUp() override { test::make_phantom(dir / "p.h5", Task::kSegmentation, 4, 16); }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // Exit `code`, exactly one "[error]" line, holding `needle`; no line of library text.
  static void expect_error(const test::CommandResult& r, int code, const std::string& needle) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "expected: " << needle << "\n" << r.output;
    std::istringstream in(r.output);
    size_t errors = 0;
    for (std::string line; std::getline(in, line);) {
      errors += line.find("[error]") != std::string::npos ? 1 : 0;
      EXPECT_LT(line.size(), 400u) << "a runaway line: " << line;
    }
    EXPECT_EQ(errors, 1u) << r.output;
    for (const char* library : {"Run with --help", "enforce fail", "DefaultCPUAllocator", "Could not convert",
                                "LOG ERROR", "terminate called"}) {
      EXPECT_EQ(r.output.find(library), std::string::npos) << library << ":\n" << r.output;
    }
  }
  test::TempDir dir;
};

// One range message for every numeric option: CLI11 used to print the limits of double in full
// (309 digits) for --gpu-memory 0, and nan or 1e15 passed to overflow into "-8589934592.0 GiB".
TEST_F(CliInput, NumericOptionsAnswerWithOneRangeMessage) {
  for (const std::string v : {"0", "-1", "inf", "nan", "1e15", "abc"}) {
    expect_error(trainer({"plan", "p.h5", "--gpu-memory", v}), 2,
                 fmt::format("--gpu-memory: '{}': expected a number in (0, 4096]", v));
  }
  EXPECT_FALSE(fs::exists(dir / "p_plan.yaml"));
  expect_error(trainer({"synth", "--cases", "4", "--val-fraction", "nan", "--out", "q.h5"}), 2,
               "--val-fraction: 'nan': expected a number in [0, 1]");
  expect_error(trainer({"synth", "--cases", "abc", "--out", "q.h5"}), 2, "--cases: 'abc': expected an integer in [0, ");
  expect_error(trainer({"synth", "--seed", "-1", "--out", "q.h5"}), 2, "--seed: '-1': expected an integer in [0, ");
  // One --seed for every command (cli_options.h): import dicom's and import images' had no range check.
  for (const std::string layout : {"nnunet", "nifti", "tiff", "dicom", "images"}) {
    const std::string input = layout == "nnunet" || layout == "dicom" ? "--source" : "--images";
    expect_error(trainer({"import", layout, input, ".", "--out", "q.h5", "--seed", "abc"}), 2,
                 "--seed: 'abc': expected an integer in [0, 9007199254740992]");
    expect_error(trainer({"import", layout, input, ".", "--out", "q.h5", "--val-fraction", "2"}), 2,
                 "--val-fraction: '2': expected a number in [0, 1]");
  }
  EXPECT_FALSE(fs::exists(dir / "q.h5"));
  expect_error(trainer({"--config", "x.yaml", "--benchmark", "--steps", "1e20"}), 2,
               "--steps: '1e20': expected an integer in [1, 1000000000]");
  expect_error(trainer({"--config", "x.yaml", "--benchmark-seconds", "0"}), 2,
               "--benchmark-seconds: '0': expected a number in (0, 604800]");
  expect_error(trainer({"plan", "p.h5", "--task", "xyz"}), 2,
               "--task: 'xyz': expected one of auto, segmentation, dose");
  expect_error(trainer({"evaluate", "surface", "--reference", ".", "--predictions", ".", "--ignore-label", "256"}), 2,
               "--ignore-label: '256': expected an integer in [-1, 255]");
}

// A split asked for by name and missing from the file is a usage error (it was exit 1).
TEST_F(CliInput, AMissingSplitIsAUsageError) {
  expect_error(trainer({"check-data", "p.h5", "--split", "holdout"}), 2,
               "p.h5: split 'holdout' is missing; the file has: train, val");
}

// One "regular file of sane size" check: /dev/zero used to be read until the kernel killed the
// trainer (exit 137); a second YAML document used to be ignored silently.
TEST_F(CliInput, AConfigIsOneSmallRegularYamlDocument) {
  expect_error(trainer({"--config", "/dev/zero"}), 2,
               "/dev/zero: is a character device; expected a config file (YAML) (a regular file)");
  test::write_text(dir / "two.yaml", "data:\n  path: p.h5\n---\ntraining:\n  epochs: 1\n");
  expect_error(trainer({"--config", "two.yaml"}), 2, "two.yaml:4:1: a second YAML document (after '---')");
  EXPECT_FALSE(fs::exists(dir / "runs"));
}

// A newline in a path is shown escaped, and the rest of the message follows on the same line (it
// used to cut the message after "config file a").
TEST_F(CliInput, APathWithANewlineKeepsTheMessageOnOneLine) {
  expect_error(trainer({"--config", "a\nb.yaml"}), 2, "config file a\\nb.yaml not found");
  fs::create_directories(dir / "odd\nfolder");
  test::write_text(dir / "odd\nfolder" / "c.yaml", "data:\n  path: missing.h5\n---\nx: 1\n");
  expect_error(trainer({"--config", "odd\nfolder/c.yaml"}), 2, "odd\\nfolder/c.yaml:4:1: a second YAML document");
}

// `synth --format tiff | nnunet --force` replaces the whole folder: no file of the previous one stays.
TEST_F(CliInput, FolderOutputsReplaceTheWholeFolder) {
  for (const std::string format : {"tiff", "nnunet"}) {
    const fs::path out = dir / ("out_" + format);
    fs::create_directories(out);
    test::write_text(out / "stale.txt", "from an earlier run");
    const auto r = trainer({"synth", "--task", "segmentation", "--cases", "2", "--size", "8", "--format", format,
                            "--out", out.filename().string(), "--force"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(fs::exists(out / "stale.txt")) << format;
    EXPECT_TRUE(fs::exists(out / (format == "tiff" ? "images" : "imagesTr"))) << format;
    for (const auto& e : fs::directory_iterator(dir.path())) {
      EXPECT_NE(e.path().filename().string()[0], '.') << "staged folder left: " << e.path();
    }
  }
}

}  // namespace
}  // namespace u3d
