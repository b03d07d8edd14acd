// OpenKBP metrics and the baseline network on a CUDA device: the same numbers as on the CPU.
#include <gtest/gtest.h>

#include "u3d/evaluate/dose_metrics.h"
#include "u3d/model/openkbp_baseline.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

TEST(OpenKbpCuda, DoseMetricsOnTheGpuEqualTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  const auto ref = torch::rand({48, 40, 32}, torch::kDouble) * 70;
  const auto pred = (ref + torch::randn_like(ref) * 3).to(torch::kFloat);
  const auto mask = (torch::rand({48, 40, 32}) > 0.2).to(torch::kUInt8);
  const auto structures = (torch::rand({3, 48, 40, 32}) > 0.7).to(torch::kUInt8);
  const std::vector<DvhStructure> list = {
      {"A", DvhKind::kOar, 0}, {"B", DvhKind::kOar, 1}, {"PTV70", DvhKind::kTarget, 2}};
  const auto cpu = evaluate_patient_dose("p", ref, pred, mask, structures, list, {2.0, 2.0, 3.0});
  const torch::Device cuda(torch::kCUDA);
  const auto gpu = evaluate_patient_dose("p", ref.to(cuda), pred.to(cuda), mask.to(cuda), structures.to(cuda), list,
                                         {2.0, 2.0, 3.0});
  EXPECT_NEAR(cpu.dose_error, gpu.dose_error, 1e-9);
  ASSERT_EQ(cpu.dvh.size(), gpu.dvh.size());
  for (size_t i = 0; i < cpu.dvh.size(); ++i) {
    EXPECT_NEAR(cpu.dvh[i].reference, gpu.dvh[i].reference, 1e-9) << cpu.dvh[i].metric;
    EXPECT_NEAR(cpu.dvh[i].prediction, gpu.dvh[i].prediction, 1e-9) << cpu.dvh[i].metric;
  }
}

TEST(OpenKbpCuda, BaselineNetworkRunsOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ModelConfig m;
  m.architecture = Architecture::kOpenKbpBaseline;
  m.base_filters = 4;
  auto net = build_network(m, 11, 1);
  net->to(torch::kCUDA);
  const auto y = net->forward(torch::randn({2, 11, 128, 128, 128}, torch::kCUDA));
  EXPECT_EQ(y.sizes(), (torch::IntArrayRef{2, 1, 128, 128, 128}));
  y.mean().backward();
  EXPECT_GE(y.min().item<float>(), 0.0f);
}

}  // namespace
}  // namespace u3d
