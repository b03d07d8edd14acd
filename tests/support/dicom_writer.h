// The DICOM tests' fixture (tests/integration/dicom_*_test.cpp): a temporary folder `dir`, the
// trainer run in it, and write() / write_all(), which run tests/python/write_dicom.py (pydicom,
// rt-utils and highdicom in the torch venv) into it (run_script(): another writer of tests/python/);
// train_one_step() makes a tiny run of x.h5. Skips the test without the venv's Python.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "test_support.h"

namespace u3d::test {

// write_dicom.py's phantom: a CT of kSlices x kRows x kCols voxels from kOrigin (mm, LPS), a sphere of
// kRadius mm around kCentre, and a dose of kDoseA + kDoseB . (x, y, z) Gy. Defined once: the DICOM
// test files compile together in a unity build (.ci/run).
inline constexpr int64_t kRows = 48, kCols = 40, kSlices = 24;
inline constexpr double kRowStep = 1.25, kColStep = 1.25, kSliceStep = 2.5;  // rt-utils needs them equal
inline constexpr double kOrigin[3] = {-30.0, -40.0, 100.0}, kCentre[3] = {-6.0, -6.0, 128.0}, kRadius = 12.0;
inline constexpr double kDoseA = 10.0, kDoseB[3] = {0.1, 0.05, 0.2};

class DicomWriterCli : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = torch_python();
    if (!python_) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
  }
  CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  // write_dicom.py OUT --patient P [extra...]; fails the test when the writer fails.
  void write(const std::string& out, const std::string& patient, const std::string& extra = "") {
    write_all({{out, patient, extra}});
  }
  // Several patients in one Python start (write_dicom.py JOB + JOB ...). The patient id is passed
  // single-quoted (it may hold '/' or '..'); `extra` is shell text (quote what needs it).
  struct Job {
    std::string out, patient, extra;
  };
  void write_all(const std::vector<Job>& jobs) {
    std::string cmd =
        "PYTHONUTF8=1 " + python_->string() + " " + (source_dir() / "tests/python/write_dicom.py").string();
    for (size_t n = 0; n < jobs.size(); ++n) {
      cmd += (n ? " + " : " ") + (dir / jobs[n].out).string() + " --patient '" + jobs[n].patient + "' " + jobs[n].extra;
    }
    cmd += " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // tests/python/<script> ARGS in the venv's Python, its output discarded; fails the test when it fails.
  void run_script(const std::string& script, const std::string& args) {
    const std::string cmd =
        python_->string() + " " + (source_dir() / "tests/python" / script).string() + " " + args + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // A 2-filter model of x.h5 (dose or segmentation, as imported) trained one step as runs/<name>.
  void train_one_step(const std::string& name) {
    test::write_text(dir / (name + ".yaml"),
                     "experiment:\n  name: " + name +
                         "\n  seed: 1\n"
                         "data:\n  path: x.h5\n  batch_size: 1\n  patch_size: [16, 32, 32]\n"
                         "model:\n  levels: 2\n  base_filters: 2\n"
                         "training:\n  epochs: 1\n  steps_per_epoch: 1\n  device: cpu\n  threads: 2\n"
                         "logging:\n  progress_seconds: 0\n");
    const auto r = trainer({"--config", name + ".yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // How often `needle` occurs in `text`.
  static size_t occurrences(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
    return n;
  }
  // The whole line of `text` that holds `needle` first; "" when none does.
  static std::string line_with(const std::string& text, const std::string& needle) {
    const size_t at = text.find(needle);
    if (at == std::string::npos) return "";
    const size_t begin = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
    return text.substr(begin, text.find('\n', at) - begin);
  }
  std::optional<fs::path> python_;
  TempDir dir;
};

}  // namespace u3d::test
