// The training step from the command line: `trainer --benchmark` (step), bf16 training on CPU, and
// the CUDA-graph switch on a machine without CUDA.
#include <gtest/gtest.h>

#include <regex>

#include "expectations.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/json.h"

namespace u3d {
namespace {

class TrainStepCli : public test::PhantomCli {
 protected:
  TrainStepCli() : PhantomCli(/*cases=*/6) {}
};

std::string json_line(const std::string& output) {
  std::istringstream in(output);
  std::string line, found;
  int count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("{\"benchmark\": \"step\"", 0) == 0) {
      found = line;
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << output;
  return found;
}

std::string field(const std::string& json, const std::string& key) {
  const std::regex re("\"" + key + "\": (\"[^\"]*\"|[^,}]+)");
  std::smatch m;
  if (!std::regex_search(json, m, re)) return "<missing>";
  return m[1];
}

TEST_F(TrainStepCli, StepBenchmarkPrintsATableAndOneJsonLine) {
  config("b");
  const auto r = trainer({"--config", "b.yaml", "--benchmark", "--steps", "3", "--warmup", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step time      median"), std::string::npos) << r.output;
  const std::string j = json_line(r.output);
  EXPECT_EQ(field(j, "device"), "\"cpu\"");
  EXPECT_EQ(field(j, "gpu"), "null");
  EXPECT_EQ(field(j, "peak_gpu_mem_bytes"), "null");
  EXPECT_EQ(field(j, "reserved_step10_bytes"), "null");  // GPU memory held after timed step 10 and the last
  EXPECT_EQ(field(j, "reserved_last_bytes"), "null");
  EXPECT_EQ(field(j, "warmup_skipped_steps"), "0");
  EXPECT_EQ(field(j, "precision"), "\"fp32\"");  // auto on CPU
  EXPECT_EQ(field(j, "channels_last"), "false");
  EXPECT_EQ(field(j, "cuda_graph"), "false");
  EXPECT_EQ(field(j, "cuda_graph_note"), "\"not on CPU\"");
  EXPECT_EQ(field(j, "data"), "\"synthetic\"");
  EXPECT_EQ(field(j, "data_wait_share"), "0");
  EXPECT_EQ(field(j, "steps"), "3");
  EXPECT_EQ(field(j, "in_channels"), "5");  // the phantom's channels
  EXPECT_EQ(field(j, "batch"), "2");
  const int64_t fwd = std::stoll(field(j, "forward_flops_per_sample"));
  EXPECT_GT(fwd, 0);
  EXPECT_EQ(std::stoll(field(j, "flops_per_step")), 3 * 2 * fwd);
  const double median = std::stod(field(j, "step_ms_median"));
  EXPECT_GT(median, 0);
  EXPECT_LE(std::stod(field(j, "step_ms_p10")), median);
  EXPECT_GE(std::stod(field(j, "step_ms_p90")), median);
  EXPECT_NEAR(std::stod(field(j, "samples_per_s")), 2e3 / median, 1e-2 * 2e3 / median);
  EXPECT_GT(std::stod(field(j, "tflops")), 0);
  EXPECT_NE(field(j, "commit"), "<missing>");
  EXPECT_FALSE(std::filesystem::exists(dir / "runs" / "b"));  // nothing trained, no run folder
}

TEST_F(TrainStepCli, StepBenchmarkTakesPrecisionAndLayoutFromTheConfig) {
  config("b");
  const auto r = trainer({"--config", "b.yaml", "--benchmark", "step", "--steps", "2", "--warmup", "0", "--set",
                          "training.precision=bf16", "--set", "model.channels_last=on"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string j = json_line(r.output);
  EXPECT_EQ(field(j, "precision"), "\"bf16\"");
  EXPECT_EQ(field(j, "channels_last"), "true");
  EXPECT_EQ(field(j, "skipped_steps"), "0");
}

// --profile: the step's time by category from LibTorch's profiler (CPU activity here): every
// category in the table and the JSON line, the shares summing to 1, ten top ops, convolutions seen.
TEST_F(TrainStepCli, StepBenchmarkProfileBreaksTheStepIntoCategories) {
  config("p");
  const auto r = trainer({"--config", "p.yaml", "--benchmark", "--steps", "1", "--warmup", "1", "--profile"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json_line(r.output);  // the step benchmark's own line, once
  std::istringstream in(r.output);
  std::string line, found;
  while (std::getline(in, line)) {
    if (line.rfind("{\"benchmark\": \"step_profile\"", 0) == 0) found = line;
  }
  ASSERT_FALSE(found.empty()) << r.output;
  const Json j = parse_json(found, "the profile line");
  EXPECT_EQ(j.at("source"), "cpu self time");
  EXPECT_EQ(j.at("steps"), 3);
  double share = 0;
  for (const char* c : {"convolution", "normalisation", "activation", "elementwise", "copy/cast", "reduction", "loss",
                        "optimizer", "other"}) {
    ASSERT_TRUE(j.at("categories").contains(c)) << c;
    share += j.at("categories").at(c).at("share").get<double>();
    EXPECT_NE(r.output.find(std::string("  ") + c), std::string::npos) << c;  // a table row
  }
  EXPECT_NEAR(share, 1.0, 2e-3);
  EXPECT_GT(j.at("total_ms_per_step").get<double>(), 0.0);
  EXPECT_GT(j.at("categories").at("convolution").at("share").get<double>(), 0.0);
  EXPECT_GT(j.at("categories").at("optimizer").at("ms").get<double>(), 0.0);
  EXPECT_EQ(j.at("top_ops").size(), 10u);
  const auto p = trainer({"--config", "p.yaml", "--profile"});  // not without the step benchmark
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("--profile goes with --benchmark"), std::string::npos) << p.output;
}

TEST_F(TrainStepCli, StepBenchmarkArgumentsAreChecked) {
  config("b");
  test::expect_exit(trainer({"--config", "b.yaml", "--benchmark", "--steps", "0"}), 2);
  test::expect_exit(trainer({"--config", "b.yaml", "--steps", "3"}), 2, "--steps and --warmup go with --benchmark");
  test::expect_exit(trainer({"--config", "b.yaml", "--benchmark", "data", "--warmup", "2"}), 2);
}

TEST_F(TrainStepCli, Bf16TrainingOnCpuWritesMetrics) {
  config("t");
  const auto r = trainer({"--config", "t.yaml", "--set", "training.precision=bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training step: bf16"), std::string::npos) << r.output;
  const auto rows = test::read_csv(dir / "runs" / "t" / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_TRUE(std::isfinite(std::stod(row.at("train_loss"))));
    EXPECT_EQ(row.at("skipped_steps"), "0");
  }
}

TEST_F(TrainStepCli, CudaGraphOnWithoutCudaIsAOneLineConfigError) {
  config("g");
  // training.device: cpu in the file: refused by the config check.
  test::expect_exit(trainer({"--config", "g.yaml", "--set", "training.cuda_graph=on"}), 2,
                    "training.cuda_graph: on needs a CUDA device");
  test::expect_exit(trainer({"--config", "g.yaml", "--set", "training.precision=fp16"}), 2,
                    "training.precision: fp16 needs a CUDA device");
  if (!torch::cuda::is_available()) {  // device auto resolves to the CPU: refused when the step is built
    test::expect_exit(
        trainer({"--config", "g.yaml", "--set", "training.device=auto", "--set", "training.cuda_graph=on"}), 2,
        "training.cuda_graph: on needs a CUDA device");
    EXPECT_FALSE(std::filesystem::exists(dir / "runs" / "g" / "metrics.csv"));
  }
}

}  // namespace
}  // namespace u3d
