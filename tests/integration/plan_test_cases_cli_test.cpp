// `trainer plan` never looks at test cases (issue 54, item 1): nnU-Net plans from imagesTr alone, so
// test cases (imagesTs, split "test") of a very different spacing, size and intensity must leave the
// plan, the fingerprint and the recorded normalisation exactly as the same dataset without them.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <sstream>

#include "expectations.h"
#include "nifti_support.h"
#include "test_support.h"

namespace u3d {
namespace {

using test::contains;

// The YAML's settings (comment lines and comments dropped), without the lines that name the dataset
// file, the run and the split to predict: what the plan decided.
std::string decisions(const std::string& yaml) {
  std::istringstream in(yaml);
  std::string line, out;
  while (std::getline(in, line)) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    // predict.split names the split to predict (test when the file has one): not a planning decision.
    if (line.empty() || contains(line, "path:") || contains(line, "name:") || line == "  split: test" ||
        line == "  split: val") {
      continue;
    }
    out += line + "\n";
  }
  return out;
}

class PlanIgnoresTestCases : public ::testing::Test {
 protected:
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  test::TempDir dir;
};

TEST_F(PlanIgnoresTestCases, TestCasesOfAnotherSpacingAndIntensityDoNotMoveThePlan) {
  const Shape3 shape{20, 24, 28};
  const fs::path plain = test::make_nnunet_raw(dir / "plain", 4, shape);
  const fs::path with_test = test::make_nnunet_raw(dir / "with_test", 4, shape);
  // Five test cases (more than the four training ones): 4 mm voxels instead of about 1 mm, 1.5x the
  // size, CT x 10: each would move the median spacing and shape, and the intensities, if the plan
  // read them.
  fs::create_directories(with_test / "imagesTs");
  for (int i = 0; i < 5; ++i) {
    const auto [image, labels] = test::nnunet_raw_case(10 + i, {30, 36, 42});
    test::TestNifti ct = test::oblique((image[0] * 10).to(torch::kInt16));
    ct.pixdim = {4, 4, 4};
    ct.sform_code = 0;  // the qform's 4 mm voxels are the geometry
    test::TestNifti t2 = ct;
    t2.data = (image[1] * 10).contiguous();
    const std::string id = fmt::format("test_{:03d}", i);
    test::write_test_nifti(with_test / "imagesTs" / (id + "_0000.nii.gz"), ct);
    test::write_test_nifti(with_test / "imagesTs" / (id + "_0001.nii.gz"), t2);
  }
  for (const std::string name : {"plain", "with_test"}) {
    auto r = trainer({"import", "nnunet", "--source", (dir / name / "Dataset001_Test").string(), "--out", name + ".h5",
                      "--seed", "3"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"plan", name + ".h5", "--gpu-memory", "8", "--out", name + ".yaml"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string a = test::read_text(dir / "plain.yaml"), b = test::read_text(dir / "with_test.yaml");
  EXPECT_EQ(decisions(b), decisions(a)) << "with test cases:\n" << b << "\nwithout:\n" << a;
  // The stored fingerprint lists the 4 training and validation cases only.
  const std::string fp = test::read_text(dir / "with_test.h5.fingerprint.json");
  EXPECT_FALSE(contains(fp, "test_000")) << fp;
  EXPECT_TRUE(contains(fp, "case_003")) << fp;

  // Naming the test split is refused: a plan never looks at the cases a model is scored on.
  const auto r = trainer({"plan", "with_test.h5", "--split", "train,test", "--out", "t.yaml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "--split test: a plan never looks at the cases a model is scored on")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "t.yaml"));
}

}  // namespace
}  // namespace u3d
