// The device-side optimizer on CUDA: the same updates as on the CPU, an Inf gradient skipped on
// the device, and a whole clip + step captured in a CUDA graph (a host read inside would make the
// capture fail). Every test skips itself where no CUDA device is present.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/step_monitor.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

std::vector<torch::Tensor> make_params(const torch::Device& device) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> out;
  for (auto shape : std::vector<std::vector<int64_t>>{{8, 4, 3, 3, 3}, {8}, {1, 8, 1, 1, 1}}) {
    out.push_back(torch::randn(shape).to(device).requires_grad_(true));
  }
  return out;
}

void set_grads(std::vector<torch::Tensor>& params, uint64_t seed) {
  torch::manual_seed(seed);
  for (auto& p : params) p.mutable_grad() = torch::randn(p.sizes()).to(p.device());
}

// The default optimizer over make_params on the GPU, gradients drawn with `grad_seed`, and a zero
// non-finite flag on the GPU.
struct CudaOptimizer {
  explicit CudaOptimizer(uint64_t grad_seed) { set_grads(params, grad_seed); }
  TrainingConfig c;
  std::vector<torch::Tensor> params = make_params(torch::kCUDA);
  Optimizer opt{c, params};
  torch::Tensor zero = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA));
};

TEST(GpuOptimizer, CudaUpdatesMatchTheCpu) {
  U3D_REQUIRE_CUDA();
  for (auto kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    TrainingConfig c;
    c.optimizer = kind;
    c.lr = 0.01;
    auto cpu = make_params(torch::kCPU);
    auto gpu = make_params(torch::kCUDA);
    Optimizer a(c, cpu), b(c, gpu);
    for (int s = 0; s < 4; ++s) {
      set_grads(cpu, 50 + static_cast<uint64_t>(s));
      set_grads(gpu, 50 + static_cast<uint64_t>(s));
      a.step(torch::zeros({}, torch::kFloat));
      b.step(torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA)));
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      EXPECT_TRUE(torch::allclose(cpu[i], gpu[i].cpu(), 1e-5, 1e-6)) << to_string(kind) << " tensor " << i;
    }
  }
}

TEST(GpuOptimizer, InfGradientIsSkippedOnTheDevice) {
  U3D_REQUIRE_CUDA();
  CudaOptimizer gpu(/*grad_seed=*/1);
  auto& [c, params, opt, zero] = gpu;
  opt.step(zero);
  std::vector<torch::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  set_grads(params, 2);
  params[0].grad().view(-1)[0] = std::numeric_limits<float>::infinity();
  const auto found = nonfinite_flag(torch::tensor(1.0f, torch::kCUDA), opt.grad_norm());
  EXPECT_TRUE(found.is_cuda());
  opt.step(found);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i])) << i;
  EXPECT_EQ(opt.steps_applied(), 1);
  StepMonitor monitor(torch::kCUDA);
  monitor.record(torch::tensor(0.5f, torch::kCUDA), found);
  monitor.record(torch::tensor(0.25f, torch::kCUDA), zero);
  const auto t = monitor.totals();
  EXPECT_EQ(t.skipped, 1);
  EXPECT_DOUBLE_EQ(t.loss_sum, 0.25);
}

TEST(GpuOptimizer, ClipAndStepCaptureInACudaGraph) {
  U3D_REQUIRE_CUDA();
  CudaOptimizer gpu(/*grad_seed=*/3);
  auto& [c, params, opt, found] = gpu;
  opt.step(found);  // warm-up outside the capture
  auto stream = c10::cuda::getStreamFromPool();
  stream.synchronize();
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    at::cuda::CUDAGraph graph;
    graph.capture_begin();
    const torch::Tensor norm = opt.grad_norm();
    opt.clip_grad_norm(norm, 1.0);
    opt.step(found);
    graph.capture_end();
    graph.replay();
    graph.replay();
  }
  torch::cuda::synchronize();
  EXPECT_EQ(opt.steps_applied(), 3);  // the warm-up and two replays
}

}  // namespace
}  // namespace u3d
