// Who launched the process (torchrun, srun, nobody) and the gradient bucket assignment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/launch_env.h"
#include "u3d/train/grad_sync.h"

namespace u3d {
namespace {

// Sets the given variables (and clears every other launcher variable) while alive.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "SLURM_STEP_ID",
          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
          "SLURM_TASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID"}) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
      names_.push_back(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~Env() {
    for (const auto& n : names_) ::unsetenv(n.c_str());
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, std::string> saved_;
};

// What a launcher tells the process: launched, launcher, rank, local rank, world size, local world
// size, store host, store port, agent store (compared as one tuple, printed field by field).
auto launch_fields(const LaunchEnv& e) {
  return std::make_tuple(e.launched, e.launcher, e.rank, e.local_rank, e.world_size, e.local_world_size, e.store_host,
                         e.store_port, e.agent_store);
}

TEST(LaunchEnv, NoLauncherIsOnePlainProcess) {
  const Env env({});
  const LaunchEnv e = read_launch_env();
  EXPECT_FALSE(e.launched);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_TRUE(e.is_main());
  EXPECT_EQ(e.describe(), "a single process");
}

TEST(LaunchEnv, ReadsTorchrunsVariables) {
  const Env env({{"RANK", "5"},
                 {"LOCAL_RANK", "1"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "node07"},
                 {"MASTER_PORT", "29511"},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                 {"TORCHELASTIC_RESTART_COUNT", "2"},
                 {"TORCHELASTIC_ERROR_FILE", "/tmp/err.json"}});
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(launch_fields(e),
            std::make_tuple(/*launched=*/true, "torchrun", /*rank=*/5, /*local_rank=*/1, /*world_size=*/8,
                            /*local_world_size=*/4, "node07", /*store_port=*/29511,
                            /*agent_store=*/true));
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_EQ(e.error_file, "/tmp/err.json");
  EXPECT_FALSE(e.is_main());
  EXPECT_EQ(e.describe(), "rank 5 of 8 (local rank 1, torchrun)");
}

TEST(LaunchEnv, ReadsSlurmInsideAJobStepOnly) {
  const std::map<std::string, std::string> job = {{"SLURM_PROCID", "3"},
                                                  {"SLURM_NTASKS", "4"},
                                                  {"SLURM_LOCALID", "1"},
                                                  {"SLURM_NTASKS_PER_NODE", "2"},
                                                  {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                                  {"SLURM_JOB_ID", "123456"}};
  {
    const Env batch_script(job);  // sbatch runs the script without a job step: one plain process
    EXPECT_FALSE(read_launch_env().launched);
  }
  auto step = job;
  step["SLURM_STEP_ID"] = "0";
  const Env env(step);
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(launch_fields(e),
            std::make_tuple(/*launched=*/true, "slurm", /*rank=*/3, /*local_rank=*/1, /*world_size=*/4,
                            /*local_world_size=*/2,
                            "gpu07",  // the job's first node hosts the store
                            /*store_port=*/20000 + 123456 % 20000,
                            /*agent_store=*/false));  // rank 0 hosts it
}

TEST(LaunchEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("gpu[07-09,12],cpu1"), "gpu07");
  EXPECT_EQ(first_slurm_host("node3,node4"), "node3");
  EXPECT_EQ(first_slurm_host("a100-[001-016]"), "a100-001");
  EXPECT_EQ(first_slurm_host("single"), "single");
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  {
    const Env env({{"RANK", "abc"}, {"WORLD_SIZE", "2"}});
    const std::string e = test::error_of<ConfigError>([] { read_launch_env(); });
    EXPECT_NE(e.find("RANK='abc'"), std::string::npos) << e;
  }
  {
    const Env env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    const std::string e = test::error_of<ConfigError>([] { read_launch_env(); });
    EXPECT_NE(e.find("RANK='2': expected an integer in 0..1"), std::string::npos) << e;
  }
  {
    const Env env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
    const std::string e = test::error_of<ConfigError>([] { read_launch_env(); });
    EXPECT_NE(e.find("MASTER_PORT"), std::string::npos) << e;
  }
}

std::vector<torch::Tensor> params_of_sizes(const std::vector<int64_t>& sizes) {
  std::vector<torch::Tensor> out;
  for (int64_t n : sizes) out.push_back(torch::zeros({n}));
  return out;
}

TEST(GradientBuckets, ReverseOrderSmallFirstBucketCapsKept) {
  // float32: 1000 elements = 4000 bytes. Caps: first 8000 bytes, then 12000.
  const auto params = params_of_sizes({1000, 1000, 1000, 1000, 5000, 1000, 1000});
  const auto buckets = gradient_buckets(params, /*cap_bytes=*/12000, /*first_cap_bytes=*/8000);
  const std::vector<std::vector<size_t>> expected = {{6, 5}, {4}, {3, 2, 1}, {0}};
  EXPECT_EQ(buckets, expected);
  std::set<size_t> seen;
  for (const auto& b : buckets) {
    for (size_t i : b) EXPECT_TRUE(seen.insert(i).second) << "parameter " << i << " twice";
  }
  EXPECT_EQ(seen.size(), params.size());
}

TEST(GradientBuckets, OneTensorLargerThanTheCapIsABucketAlone) {
  const auto params = params_of_sizes({10, 100000, 10});
  const auto buckets = gradient_buckets(params, /*cap_bytes=*/1000, /*first_cap_bytes=*/100);
  const std::vector<std::vector<size_t>> expected = {{2}, {1}, {0}};
  EXPECT_EQ(buckets, expected);
}

}  // namespace
}  // namespace u3d
