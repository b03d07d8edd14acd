// `trainer import nnunet` then `trainer plan --memory-model nnunet` on the seeded phantoms of
// tests/python/nnunet_phantoms.py (written here, nibabel in the torch venv), against the plans and
// fingerprints nnU-Net 2.6.2 wrote for the same files (tests/data/nnunet_plans): the YAML's patch,
// batch, strides and kernels for 3d_fullres and 2d are nnU-Net's, and its normalisation is the
// importer's, within sampling noise of nnU-Net's foreground statistics. Dataset903 (slice spacing
// 1.5 to 5 mm) is imported as stored, planned, re-imported with the `--spacing` its plan's header
// gives, and planned again: nnU-Net's plan, and the same native-resolution statistics both times.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "nnunet_golden.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/normalize_spec.h"

namespace u3d {
namespace {

using Json = nlohmann::json;

class PlanGoldenCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto python = test::torch_python();
    if (!python) GTEST_SKIP() << "no torch venv (U3D_TORCH_PYTHON); scripts/setup.sh makes it";
    const std::string cmd = test::nnunet_phantoms_command(*python, dir / "raw");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  test::CommandResult trainer(const std::vector<std::string>& args) { return test::run_trainer(args, dir.path()); }
  // Imports raw/<name> (every case in train) and plans it with nnU-Net's memory model; the 3d config.
  Config import_and_plan(const std::string& name, const std::string& stem, const std::string& spacing = "") {
    std::vector<std::string> args = {"import", "nnunet",     "--source",       "raw/" + name,
                                     "--out",  stem + ".h5", "--val-fraction", "0"};
    if (!spacing.empty()) args.insert(args.end(), {"--spacing", spacing});
    auto r = trainer(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = trainer({"plan", stem + ".h5", "--memory-model", "nnunet", "--out", stem + ".yaml"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return load_config(dir / (stem + ".yaml"));
  }
  // The YAML's patch, batch, strides and kernels against nnU-Net's configuration.
  static void expect_configuration(const Config& ours, const Json& theirs) {
    const bool two_d = theirs.at("patch_size").size() == 2;
    const int first = two_d ? 1 : 0;
    for (int a = first; a < 3; ++a) {
      EXPECT_EQ(ours.data.patch_size[a], theirs.at("patch_size")[a - first].get<int64_t>()) << "patch axis " << a;
    }
    EXPECT_EQ(ours.data.batch_size, theirs.at("batch_size").get<int64_t>());
    const Json& arch = theirs.at("architecture").at("arch_kwargs");
    ASSERT_EQ(ours.model.strides.size(), arch.at("strides").size());
    for (size_t s = 0; s < ours.model.strides.size(); ++s) {
      for (int a = first; a < 3; ++a) {
        EXPECT_EQ(ours.model.strides[s][a], arch.at("strides")[s][a - first].get<int64_t>()) << "stage " << s;
        EXPECT_EQ(ours.model.kernel_sizes[s][a], arch.at("kernel_sizes")[s][a - first].get<int64_t>()) << "stage " << s;
      }
    }
  }
  // The CT normalisation against nnU-Net's foreground statistics: percentiles to the HU, mean and
  // standard deviation within its sampling noise.
  static void expect_normalisation(const Config& ours, const std::string& name) {
    ASSERT_EQ(ours.data.normalize.size(), 1u);
    const ChannelNorm n = parse_channel_norm(ours.data.normalize[0]);
    ASSERT_EQ(n.kind, ChannelNorm::Kind::kCt) << ours.data.normalize[0];
    const Json fingerprint = test::nnunet_golden(name, "fingerprint");
    const Json& f = fingerprint.at("foreground_intensity_properties_per_channel").at("0");
    EXPECT_NEAR(n.a, f.at("percentile_00_5").get<double>(), 0.5);
    EXPECT_NEAR(n.b, f.at("percentile_99_5").get<double>(), 0.5);
    EXPECT_NEAR(n.mean, f.at("mean").get<double>(), 0.01);
    EXPECT_NEAR(n.std, f.at("std").get<double>(), 0.01);
  }
  test::TempDir dir;
};

TEST_F(PlanGoldenCli, ImportAndPlanGiveNnUNetsPlans) {
  for (const auto& [name, stem] :
       std::vector<std::pair<std::string, std::string>>{{"Dataset901_Thick", "thick"}, {"Dataset902_Iso", "iso"}}) {
    SCOPED_TRACE(name);
    const Config full = import_and_plan(name, stem);
    const Json configs = test::nnunet_golden(name, "plans").at("configurations");
    expect_configuration(full, configs.at("3d_fullres"));
    expect_normalisation(full, name);
    const Config two = load_config(dir / (stem + "_2d.yaml"));
    EXPECT_EQ(two.model.dims, 2);
    expect_configuration(two, configs.at("2d"));
    expect_normalisation(two, name);
    EXPECT_FALSE(fs::exists(dir / (stem + "_lowres.yaml")));  // nnU-Net keeps no 3d_lowres for either
  }
}

TEST_F(PlanGoldenCli, VaryingSliceSpacingIsPlannedAfterTheReimportItsHeaderGives) {
  const std::string name = "Dataset903_Varying";
  const Config stored = import_and_plan(name, "varying");
  expect_normalisation(stored, name);
  const std::string header = test::read_text(dir / "varying.yaml");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(header, m, std::regex("--spacing ([0-9.,]+)"))) << header;
  EXPECT_EQ(m[1].str(), "1.775,0.8,0.8");  // nnU-Net's target: the 10th percentile of the slice spacings
  const Config resampled = import_and_plan(name, "varying_iso", m[1].str());
  const Json configs = test::nnunet_golden(name, "plans").at("configurations");
  expect_configuration(resampled, configs.at("3d_fullres"));
  expect_configuration(load_config(dir / "varying_iso_2d.yaml"), configs.at("2d"));
  // The statistics of the native-resolution images, the same as before resampling.
  EXPECT_EQ(resampled.data.normalize, stored.data.normalize);
  expect_normalisation(resampled, name);
}

}  // namespace
}  // namespace u3d
