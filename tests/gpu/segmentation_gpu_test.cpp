// The segmentation paths on CUDA: the streamed sliding window accumulates on the GPU and matches
// the CPU; a deep-supervision step runs there. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"

#include "u3d/model/unet.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

ModelConfig small_model() {
  ModelConfig m = test::unet_config(4);
  m.deep_supervision = true;
  return m;
}

class DeviceCheckingSink : public SlabSink {
 public:
  void consume(int64_t, const torch::Tensor& slab) override {
    on_cuda = on_cuda && slab.is_cuda();
    slabs.push_back(slab.cpu());
  }
  bool on_cuda = true;
  std::vector<torch::Tensor> slabs;
};

TEST(SegmentationGpu, StreamedPredictionOnCudaMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  auto net = build_network(small_model(), 1, 3);
  const auto image = torch::randn({1, 40, 24, 20});
  SlidingWindowOptions o = test::window({16, 16, 16}, 4, /*mirror=*/true);
  const auto cpu = sliding_window_predict(*net, image, o, torch::kCPU);
  net->to(torch::kCUDA);
  DeviceCheckingSink sink;
  const test::NoTf32 no_tf32;  // fp32 on both sides: only summation order differs
  sliding_window_predict(*net, image, o, torch::Device(torch::kCUDA, 0), sink);
  EXPECT_TRUE(sink.on_cuda);  // accumulated on the GPU, handed out there
  EXPECT_TRUE(torch::allclose(torch::cat(sink.slabs, 1), cpu, 1e-4, 1e-5));
}

TEST(SegmentationGpu, DeepSupervisionStepOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(1);
  auto net = build_network(small_model(), 1, 3);
  net->to(torch::kCUDA);
  const auto x = torch::randn({2, 1, 16, 16, 16}, torch::kCUDA);
  const auto y = torch::randint(0, 3, {2, 16, 16, 16}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  const auto outs = net->forward_deep(x);
  ASSERT_EQ(outs.size(), 3u);
  const auto loss = deep_supervision_loss(Loss(LossKind::kDiceCe), outs, y, deep_supervision_weights(3));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  for (const auto& p : net->parameters()) {
    if (p.grad().defined()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
  }
}

}  // namespace
}  // namespace u3d
