// CUDA paths; every test skips itself where no CUDA device is present.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/model/checkpoint.h"
#include "u3d/predict/predictor.h"

namespace u3d {
namespace {

class Gpu : public test::CudaTest {};

TEST_F(Gpu, TrainingOnCudaLowersTheLoss) {
  phantom(8, 32, {"g"});
  const auto r = trainer({"--config", "g.yaml", "--set", "training.device=cuda", "--set", "training.epochs=8", "--set",
                          "data.patch_size=32", "--set", "training.deterministic=false"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device cuda"), std::string::npos);
  EXPECT_NE(r.output.find("captured in a CUDA graph"), std::string::npos) << r.output;  // no silent eager fallback
  const auto rows = test::read_csv(dir / "runs" / "g" / "metrics.csv");
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_LT(std::stod(rows.back().at("train_loss")), std::stod(rows.front().at("train_loss")));
}

TEST_F(Gpu, CudaCheckpointGivesTheSameOutputsOnCpu) {
  ModelConfig m = test::unet_config(3, 8);
  torch::manual_seed(3);
  auto net = build_network(m, 2, 1);
  net->to(torch::kCUDA);
  CheckpointInfo info;
  info.config_yaml = "data: {path: x.h5}\n";
  save_checkpoint(dir / "c.pt", info, *net, nullptr);
  auto cpu_net = build_network(m, 2, 1);
  load_checkpoint(dir / "c.pt", *cpu_net, nullptr, torch::kCPU, false);
  net->eval();
  cpu_net->eval();
  const auto x = torch::randn({1, 2, 16, 16, 16});
  const test::NoTf32 no_tf32;  // fp32 on both sides: only summation order differs
  const auto a = net->forward(x.to(torch::kCUDA)).cpu();
  const auto b = cpu_net->forward(x);
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<float>();
}

TEST_F(Gpu, SlidingWindowOnCudaMatchesCpu) {
  ModelConfig m = test::unet_config(2);
  torch::manual_seed(5);
  auto net = build_network(m, 1, 2);
  const auto image = torch::randn({1, 20, 20, 20});
  SlidingWindowOptions o;
  o.patch = {8, 8, 8};
  const auto cpu = sliding_window_predict(*net, image, o, torch::kCPU);
  net->to(torch::kCUDA);
  const test::NoTf32 no_tf32;
  const auto gpu = sliding_window_predict(*net, image, o, torch::kCUDA).cpu();
  EXPECT_TRUE(torch::allclose(cpu, gpu, 1e-4, 1e-5)) << (cpu - gpu).abs().max().item<float>();
}

}  // namespace
}  // namespace u3d
