// `trainer bench-norm SITES.json` (app/norm_benchmark.h) on a machine without a GPU: ATen's path is
// timed for every site and counted into the sum; the project's kernels and cuDNN's graphs say why they
// did not run and stay out of it; a sites file that is wrong is one line naming the file and the key.
#include <gtest/gtest.h>

#include <sstream>

#include "expectations.h"
#include "test_support.h"
#include "u3d/core/json.h"

namespace u3d {
namespace {

class BenchNormCli : public ::testing::Test {
 protected:
  test::CommandResult bench(const std::string& sites, const std::vector<std::string>& extra = {}) {
    test::write_text(dir / "sites.json", sites);
    std::vector<std::string> args{"bench-norm", "sites.json", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_trainer(args, dir.path());
  }
  test::TempDir dir;
};

TEST_F(BenchNormCli, TimesAtenOnTheCpuAndSaysWhyTheOtherWaysDoNotRun) {
  const auto r = bench(R"({"precision": "fp32", "sites": [
      {"norm": "batch", "shape": [2, 8, 4, 6, 6], "activation": "leaky_relu", "negative_slope": 0.2, "count": 2},
      {"norm": "instance", "shape": [1, 5, 3, 4, 5], "activation": "relu", "count": 3},
      {"norm": "batch", "shape": [4, 8, 16, 16], "activation": "none"}]})",
                       {"--steps", "2", "--warmup", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string last;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{", 0) == 0) last = line;
  const Json j = parse_json(last, "bench-norm's JSON line");
  EXPECT_EQ(j["benchmark"], "norm");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["layers"], 6);
  ASSERT_EQ(j["sites"].size(), 3u);
  EXPECT_EQ(j["sites"][2]["shape"], Json::parse("[4, 8, 1, 16, 16]")) << "a 2-D site is (N, C, 1, H, W)";
  double sum = 0.0;
  for (const auto& site : j["sites"]) {
    ASSERT_EQ(site["aten"]["status"], "ok");
    EXPECT_GT(site["aten"]["fwd_ms"].get<double>(), 0.0);
    EXPECT_GT(site["aten"]["fwd_bwd_ms"].get<double>(), 0.0);
    sum += site["aten"]["fwd_bwd_ms"].get<double>() * site["count"].get<double>();
    EXPECT_EQ(site["ours"]["status"], "not on the CPU");
    EXPECT_EQ(site["cudnn"]["status"], "not on the CPU");
    EXPECT_TRUE(site["ours"]["fwd_bwd_ms"].is_null());
  }
  EXPECT_NEAR(j["sum_ms"]["aten"].get<double>(), sum, 1e-3);
  EXPECT_TRUE(j["sum_ms"]["ours"].is_null());
  EXPECT_EQ(j["sum_sites"]["aten"], 3);
  EXPECT_EQ(j["sum_sites"]["cudnn"], 0);
  EXPECT_TRUE(test::contains(r.output, "fwd+bwd ms per layer")) << "the table on stderr";
}

TEST_F(BenchNormCli, AWrongSitesFileIsOneLineNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"sites": [{"norm": "group", "shape": [1, 2, 3, 4, 5]}]})",
       "sites[0]: norm 'group': expected batch or instance"},
      {R"({"sites": [{"norm": "batch", "shape": [1, 2, 3]}]})",
       "sites[0]: shape: expected [N, C, D, H, W] or [N, C, H, W]"},
      {R"({"sites": [{"norm": "batch", "shape": [1, 0, 3, 4]}]})",
       "sites[0]: shape [1, 0, 3, 4]: sizes must be positive"},
      {R"({"sites": [{"norm": "batch", "shape": [1, 2, 3, 4], "activation": "gelu"}]})", "activation 'gelu'"},
      {R"({"sites": [{"norm": "batch", "shape": [1, 2, 3, 4], "count": 0}]})", "sites[0]: count: expected at least 1"},
      {R"({"precision": "fp8", "sites": [{"norm": "batch", "shape": [1, 2, 3, 4]}]})", "precision 'fp8'"},
      {R"({"sites": []})", "expected an object with a non-empty \"sites\" list"},
  };
  for (const auto& [text, needle] : cases) {
    SCOPED_TRACE(text);
    const auto r = bench(text);
    test::expect_exit(r, 2, "sites.json: ");
    EXPECT_TRUE(test::contains(r.output, needle)) << r.output;
    EXPECT_EQ(r.output.find("[error]"), r.output.rfind("[error]")) << "one error line: " << r.output;
    EXPECT_FALSE(test::contains(r.output, "{\"benchmark\"")) << "no figures from a wrong file";
  }
  test::expect_exit(bench("{not json"), 1, "sites.json: not valid JSON");
  test::expect_exit(bench(R"({"sites": [{"norm": "batch", "shape": [1, 2, 3, 4]}]})", {"--device", "tpu"}), 2,
                    "--device");
  test::expect_exit(bench(R"({"sites": [{"norm": "batch", "shape": [1, 2, 3, 4]}]})", {"--steps", "0"}), 2, "--steps");
}

}  // namespace
}  // namespace u3d
