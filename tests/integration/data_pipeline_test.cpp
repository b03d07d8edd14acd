// The data pipeline through the trainer binary: worker count never changes a run, data-wait
// accounting in metrics.csv and the log, the data benchmark, and a worker failure that stops
// training with the case and reason.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdlib>

#include "expectations.h"
#include "fixtures.h"
#include "test_support.h"

namespace u3d {
namespace {

using test::read_csv;
using test::run_trainer;

class DataPipeline : public test::PhantomCli {};

TEST_F(DataPipeline, WorkerCountNeverChangesTheRun) {
  const std::vector<std::string> augment = {
      "--set", "augment.rot90_prob=0.5",     "--set", "augment.affine_prob=0.3",
      "--set", "augment.intensity_prob=0.5", "--set", "augment.intensity_channels=[ct]",
      "--set", "augment.noise_prob=0.3",     "--set", "data.foreground_fraction=0.33"};
  std::vector<std::string> losses;
  for (const std::string workers : {"1", "3"}) {
    auto args = augment;
    args.insert(args.end(), {"--set", "data.workers=" + workers, "--set", "data.prefetch=2"});
    const auto r = train("w" + workers, args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(workers + " sampler thread"), std::string::npos) << r.output;
    std::string column;
    for (const auto& row : read_csv(dir / "runs" / ("w" + workers) / "metrics.csv"))
      column += row.at("train_loss") + ",";
    losses.push_back(column);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

TEST_F(DataPipeline, MetricsAndLogReportTheDataWait) {
  const auto r = train("m", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(dir / "runs" / "m" / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    const double wait = std::stod(row.at("data_seconds")), share = std::stod(row.at("data_share"));
    EXPECT_GE(wait, 0.0);
    EXPECT_LE(wait, std::stod(row.at("epoch_seconds")) + 1e-3);
    EXPECT_GE(share, 0.0);
    EXPECT_LE(share, 1.0);
  }
  EXPECT_NE(r.output.find("data wait"), std::string::npos);
  EXPECT_NE(r.output.find("training cache 6 cases"), std::string::npos) << r.output;  // 8 cases, 2 for val
}

// The GPU busy share (train/gpu_busy.h) needs CUDA events: on the CPU its metrics.csv column is
// there and empty (never 0), and no line claims a GPU share or a GPU idle time.
TEST_F(DataPipeline, GpuBusyColumnIsThereAndEmptyOnTheCpu) {
  const auto r = train("g", {"--set", "logging.progress=lines", "--set", "logging.progress_seconds=0.001"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = read_csv(dir / "runs" / "g" / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    ASSERT_TRUE(row.count("gpu_busy")) << "no gpu_busy column";
    EXPECT_EQ(row.at("gpu_busy"), "") << "epoch " << row.at("epoch");
  }
  EXPECT_NE(r.output.find("samples/s, data wait"), std::string::npos) << r.output;  // progress lines were written
  EXPECT_EQ(r.output.find(", gpu "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("GPU idle"), std::string::npos) << r.output;
}

TEST_F(DataPipeline, DataBenchmarkPrintsATableAndJson) {
  config("b");
  const auto r = run_trainer(
      {"--config", "b.yaml", "--benchmark", "data", "--workers", "1,2", "--benchmark-seconds", "0.5"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batches/s"), std::string::npos) << r.output;
  const auto json = r.output.find("{\"benchmark\": \"data\"");
  ASSERT_NE(json, std::string::npos) << r.output;
  const std::string line = r.output.substr(json, r.output.find('\n', json) - json);
  for (const char* key : {"\"stage\": \"host\", \"workers\": 1", "\"stage\": \"host\", \"workers\": 2",
                          "\"stage\": \"device\", \"workers\": 1", "\"stage\": \"device\", \"workers\": 2",
                          "\"batches_per_s\"", "\"samples_per_s\"", "\"mb_per_s\""}) {
    EXPECT_NE(line.find(key), std::string::npos) << key << "\n" << line;
  }
  if (!torch::cuda::is_available()) {
    EXPECT_NE(line.find("\"not_measured\": [\"pinned\", \"gpu\"]"), std::string::npos) << line;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "runs" / "b" / "checkpoints"));  // no training happened
}

TEST_F(DataPipeline, BenchmarkArgumentsAreChecked) {
  config("b");
  test::expect_exit(trainer({"--config", "b.yaml", "--benchmark", "model"}), 2, "expected data, step");
  test::expect_exit(trainer({"--config", "b.yaml", "--benchmark", "model"}), 2);
  test::expect_exit(trainer({"--config", "b.yaml", "--benchmark", "data", "--workers", "0,x"}), 2);
  test::expect_exit(trainer({"--config", "b.yaml", "--workers", "2"}), 2);
}

TEST_F(DataPipeline, AWorkerFailureStopsTrainingWithTheCase) {
  // Fault injection: every sample of the case fails in the sampler threads.
  ::setenv("U3D_TEST_FAULTS", "sampler_case@case_000", 1);
  const auto r = train("f", {"--set", "data.workers=2"});
  ::unsetenv("U3D_TEST_FAULTS");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("case 'case_000': injected fault"), std::string::npos) << r.output;
}

TEST_F(DataPipeline, GpuCacheOnACpuRunIsAConfigError) {
  test::expect_exit(train("g", {"--set", "data.cache=gpu"}), 2, "data.cache: gpu needs");
}

}  // namespace
}  // namespace u3d
