// The fixture of the suites whose input a script of tests/python writes with the torch venv's Python
// (numpy, nibabel, Pillow): nnU-Net raw datasets, slices, hostile files.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "test_support.h"

namespace u3d::test {

// Skips the test where the torch venv is missing; else SetUp runs `tests/python/<script> <out>
// <args>` (`out` below the temporary folder `dir`, "" dir itself; stderr into stdout) and fails the
// test when it fails. A fixture that prepares more overrides SetUp, calls this one first and returns
// when IsSkipped() or HasFatalFailure().
class PythonInputTest : public ::testing::Test {
 protected:
  PythonInputTest(std::string script, std::string out, std::string args = "")
      : script_(std::move(script)), out_(std::move(out)), args_(std::move(args)) {}
  void SetUp() override {
    const auto python = torch_python();
    if (!python) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
    const fs::path out = out_.empty() ? dir.path() : dir / out_;
    const std::string cmd = python->string() + " " + (source_dir() / "tests/python" / script_).string() + " " +
                            out.string() + (args_.empty() ? "" : " " + args_) + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  TempDir dir;

 private:
  std::string script_, out_, args_;
};

}  // namespace u3d::test
