#include <gtest/gtest.h>

#include "fixtures.h"
#include "u3d/core/errors.h"
#include "u3d/predict/predictor.h"

namespace u3d {
namespace {

// Returns a fixed function of its input so the blended prediction is known exactly:
// output channel 0 = 2 * input channel 0.
class Doubler : public NetworkImpl {
 public:
  torch::Tensor forward(const torch::Tensor& x) override {
    ++calls;
    batch_sizes.push_back(x.size(0));
    return x.narrow(1, 0, 1) * 2.0;
  }
  int64_t size_divisor() const override { return 1; }
  int calls = 0;
  std::vector<int64_t> batch_sizes;
};

TEST(Predictor, WindowStartsCoverTheVolume) {
  EXPECT_EQ(window_starts(64, 64, 0.5), (std::vector<int64_t>{0}));
  EXPECT_EQ(window_starts(40, 64, 0.5), (std::vector<int64_t>{0}));
  EXPECT_EQ(window_starts(100, 64, 0.5), (std::vector<int64_t>{0, 18, 36}));  // as nnU-Net: ceil(36 / 32) + 1 windows
  EXPECT_EQ(window_starts(128, 64, 0.5), (std::vector<int64_t>{0, 32, 64}));
  for (int64_t size : {65, 77, 130, 200}) {
    const auto s = window_starts(size, 32, 0.5);
    EXPECT_EQ(s.front(), 0);
    EXPECT_EQ(s.back(), size - 32);
    for (size_t i = 1; i < s.size(); ++i) EXPECT_LE(s[i] - s[i - 1], 16);
  }
}

// SlidingWindowOptions::stop is polled before each batch of windows: validation answers Ctrl-C
// inside a large case instead of after it.
TEST(Predictor, StopEndsThePredictionBetweenBatchesOfWindows) {
  auto net = std::make_shared<Doubler>();
  const auto image = torch::randn({1, 20, 13, 30});
  SlidingWindowOptions o = test::window({8, 8, 16}, 1);
  int polls = 0;
  o.stop = [&] { return ++polls > 3; };
  EXPECT_THROW(sliding_window_predict(*net, image, o, torch::kCPU), StoppedError);
  EXPECT_EQ(polls, 4);
  EXPECT_EQ(net->calls, 3);  // the windows after the stop never ran
}

TEST(Predictor, GaussianMapIsSymmetricWithPeakOne) {
  const auto g = gaussian_importance_map({9, 8, 16});
  EXPECT_EQ(g.sizes(), (torch::IntArrayRef{9, 8, 16}));
  EXPECT_FLOAT_EQ(g.max().item<float>(), 1.0f);
  EXPECT_GT(g.min().item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(g, torch::flip(g, {0})));
  EXPECT_TRUE(torch::allclose(g, torch::flip(g, {1, 2})));
  EXPECT_FLOAT_EQ(g[4][3][7].item<float>(), g[4][4][8].item<float>());
}

TEST(Predictor, SlidingWindowReproducesAVoxelwiseNetworkExactly) {
  auto net = std::make_shared<Doubler>();
  const auto image = torch::randn({2, 20, 13, 30});
  SlidingWindowOptions o = test::window({8, 8, 16}, 3);
  o.overlap = 0.5;
  const auto out = sliding_window_predict(*net, image, o, torch::kCPU);
  ASSERT_EQ(out.sizes(), (torch::IntArrayRef{1, 20, 13, 30}));
  EXPECT_TRUE(torch::allclose(out[0], image[0] * 2.0, 1e-5, 1e-5));
  // 20 -> 4 windows (0, 4, 8, 12 spread), 13 -> 2, 30 -> 3: windows batched by 3
  const size_t windows =
      window_starts(20, 8, 0.5).size() * window_starts(13, 8, 0.5).size() * window_starts(30, 16, 0.5).size();
  EXPECT_EQ(static_cast<size_t>(net->calls), (windows + 2) / 3);
  EXPECT_EQ(net->batch_sizes.front(), 3);
}

TEST(Predictor, VolumeSmallerThanThePatchIsPaddedAndCropped) {
  auto net = std::make_shared<Doubler>();
  const auto image = torch::randn({1, 5, 6, 7});
  SlidingWindowOptions o;
  o.patch = {8, 8, 8};
  const auto out = sliding_window_predict(*net, image, o, torch::kCPU);
  EXPECT_EQ(out.sizes(), (torch::IntArrayRef{1, 5, 6, 7}));
  EXPECT_TRUE(torch::allclose(out[0], image[0] * 2.0, 1e-5, 1e-5));
}

// Adds a ramp along W that no mirroring leaves unchanged: not flip-equivariant.
class Ramp : public NetworkImpl {
 public:
  torch::Tensor forward(const torch::Tensor& x) override {
    return x.narrow(1, 0, 1) + torch::arange(x.size(4), x.options()).view({1, 1, 1, 1, -1});
  }
  int64_t size_divisor() const override { return 1; }
};

TEST(Predictor, MirrorTtaIsOneBatchedPassAndKeepsEquivariantOutputs) {
  auto net = std::make_shared<Doubler>();
  const auto image = torch::randn({1, 8, 8, 8});
  SlidingWindowOptions o = test::window({8, 8, 8}, 1, /*mirror=*/true);
  const auto out = sliding_window_predict(*net, image, o, torch::kCPU);
  EXPECT_EQ(net->calls, 1);
  EXPECT_EQ(net->batch_sizes.front(), 8);  // 8 mirrorings of the one window, together
  EXPECT_TRUE(torch::allclose(out[0], image[0] * 2.0, 1e-5, 1e-5));
  EXPECT_EQ(mirror_combinations({4, 4, 4}).size(), 8u);
  EXPECT_TRUE(mirror_combinations({4, 4, 4}).front().empty());
  // A slice window (model.dims 2): the 4 in-plane mirrorings; flipping its 1-voxel axis would repeat them.
  EXPECT_EQ(mirror_combinations({1, 4, 4}), (std::vector<std::vector<int64_t>>{{}, {3}, {4}, {3, 4}}));
  EXPECT_EQ(mirror_combinations({4, 1, 4}), (std::vector<std::vector<int64_t>>{{}, {2}, {4}, {2, 4}}));
}

TEST(Predictor, MirrorTtaAveragesMirroredOutputs) {
  auto net = std::make_shared<Ramp>();
  const auto image = torch::zeros({1, 4, 4, 6});
  SlidingWindowOptions o;
  o.patch = {4, 4, 6};
  o.mirror = true;
  const auto out = sliding_window_predict(*net, image, o, torch::kCPU);
  // Half of the mirrorings flip W: ramp 0..5 averaged with 5..0 is 2.5 everywhere.
  EXPECT_TRUE(torch::allclose(out, torch::full_like(out, 2.5), 1e-5, 1e-5));
  o.mirror = false;
  EXPECT_FALSE(torch::allclose(sliding_window_predict(*net, image, o, torch::kCPU), torch::full_like(out, 2.5)));
}

}  // namespace
}  // namespace u3d
