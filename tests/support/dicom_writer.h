// The DICOM tests' fixture (tests/integration/dicom_*_test.cpp): a temporary folder `dir`, the
// trainer run in it, and write(), which runs tests/python/write_dicom.py (pydicom, rt-utils and
// highdicom in the torch venv) into it (run_script(): another writer of tests/python/). Skips the test
// without the venv's Python.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "test_support.h"

namespace u3d::test {

class DicomWriterCli : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = torch_python();
    if (!python_) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
  }
  CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  // write_dicom.py OUT --patient P [extra...]; fails the test when the writer fails.
  void write(const std::string& out, const std::string& patient, const std::string& extra = "") {
    run_script("write_dicom.py", (dir / out).string() + " --patient " + patient + " " + extra);
  }
  // tests/python/<script> ARGS in the venv's Python, its output discarded; fails the test when it fails.
  void run_script(const std::string& script, const std::string& args) {
    const std::string cmd =
        python_->string() + " " + (source_dir() / "tests/python" / script).string() + " " + args + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::optional<fs::path> python_;
  TempDir dir;
};

}  // namespace u3d::test
