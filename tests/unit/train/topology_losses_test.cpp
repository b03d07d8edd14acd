#include "u3d/train/topology_losses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "u3d/core/errors.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

using torch::indexing::Slice;

// Logits (N, K, ...) of +margin for each voxel's label and -margin for the other classes.
torch::Tensor logits_for(const torch::Tensor& labels, int64_t k, double margin = 20.0) {
  return torch::one_hot(labels, k).movedim(-1, 1).to(torch::kFloat) * (2.0 * margin) - margin;
}

// A 1-voxel-thick line of label 1 along W in a (1, d, d, w) label volume, at D = H = d / 2.
torch::Tensor line_labels(int64_t d, int64_t w, int64_t from, int64_t to) {
  torch::Tensor labels = torch::zeros({1, d, d, w}, torch::kLong);
  labels.index_put_({0, d / 2, d / 2, Slice(from, to)}, 1);
  return labels;
}

float at(const torch::Tensor& x, std::vector<int64_t> index) {
  torch::Tensor t = x;
  for (int64_t i : index) t = t.select(0, i);
  return t.item<float>();
}

using LossFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;

// Every masked loss of the header, with its default settings, under a name for messages.
std::vector<std::pair<std::string, LossFn>> all_losses() {
  return {
      {"cldice", [](auto& l, auto& y, auto& v) { return u3d::cldice_loss(l, y, v); }},
      {"skeleton_recall", [](auto& l, auto& y, auto& v) { return u3d::skeleton_recall_loss(l, y, v); }},
      {"boundary", [](auto& l, auto& y, auto& v) { return u3d::boundary_loss(l, y, v); }},
      {"weighted_ce",
       [](auto& l, auto& y, auto& v) {
         return u3d::weighted_cross_entropy(l, y, v, {1.0, 2.0, 0.5});
       }},
      {"masked_dice", [](auto& l, auto& y, auto& v) { return u3d::masked_soft_dice_loss(l, y, v); }},
  };
}

// Random (2, 3, 6, 7, 8) logits, labels 0..2 in blobs, and a mask with about a third invalid, where
// the labels hold the ignore value 255.
struct RandomCase {
  torch::Tensor logits, labels, valid;
};
RandomCase random_case(uint64_t seed) {
  torch::manual_seed(seed);
  RandomCase c;
  c.logits = torch::randn({2, 3, 6, 7, 8}) * 2.0;
  c.labels = torch::randint(0, 3, {2, 3, 4, 4}, torch::kLong)
                 .repeat_interleave(2, 1)
                 .repeat_interleave(2, 2)
                 .repeat_interleave(2, 3)
                 .slice(2, 0, 7)
                 .contiguous();
  c.valid = torch::rand({2, 6, 7, 8}) > 0.33;
  c.labels = c.labels.masked_fill(c.valid.logical_not(), 255);
  return c;
}

TEST(TopologyLosses, SoftMorphologyByHand) {
  torch::Tensor cube = torch::zeros({1, 1, 9, 9, 9});
  cube.index_put_({0, 0, Slice(2, 7), Slice(2, 7), Slice(2, 7)}, 1.0);
  const torch::Tensor eroded = u3d::soft_erode(cube);
  EXPECT_EQ(eroded.sum().item<float>(), 27.0f);  // the 3x3x3 interior
  EXPECT_EQ(at(eroded, {0, 0, 3, 3, 3}), 1.0f);
  EXPECT_EQ(at(eroded, {0, 0, 2, 4, 4}), 0.0f);
  EXPECT_TRUE(torch::equal(u3d::soft_open(cube), cube));  // a cube is open under the 3x3x3 box
  torch::Tensor dot = torch::zeros({1, 1, 5, 5, 5});
  dot.index_put_({0, 0, 2, 2, 2}, 1.0);
  EXPECT_EQ(u3d::soft_dilate(dot).sum().item<float>(), 27.0f);
  EXPECT_EQ(u3d::soft_open(dot).sum().item<float>(), 0.0f);
  // The volume's border is not background: a full volume stays full.
  EXPECT_EQ(u3d::soft_erode(torch::ones({1, 1, 3, 3, 3})).sum().item<float>(), 27.0f);
}

TEST(TopologyLosses, SoftSkeletonOfThinLineIsTheLine) {
  const torch::Tensor line = line_labels(7, 7, 1, 6).unsqueeze(1).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(u3d::soft_skeleton(line, /*iterations=*/3), line));
  EXPECT_TRUE(torch::equal(u3d::soft_skeleton(line, /*iterations=*/0), line));
}

TEST(TopologyLosses, SoftSkeletonOfCubeHasCentreNotCorners) {
  torch::Tensor cube = torch::zeros({1, 1, 9, 9, 9});
  cube.index_put_({0, 0, Slice(2, 7), Slice(2, 7), Slice(2, 7)}, 1.0);
  const torch::Tensor skel = u3d::soft_skeleton(cube, /*iterations=*/3);
  EXPECT_EQ(at(skel, {0, 0, 4, 4, 4}), 1.0f);
  EXPECT_EQ(at(skel, {0, 0, 2, 2, 2}), 0.0f);
  EXPECT_EQ(at(skel, {0, 0, 6, 6, 6}), 0.0f);
  EXPECT_EQ(at(skel, {0, 0, 2, 6, 2}), 0.0f);
  EXPECT_TRUE(torch::equal(skel, (skel > 0.5).to(torch::kFloat)));  // binary in, binary out
  // One iteration does not reach the centre of a 5-voxel-thick cube.
  EXPECT_EQ(u3d::soft_skeleton(cube, /*iterations=*/1).sum().item<float>(), 0.0f);
}

TEST(TopologyLosses, OneHotLabelsScatterIntoTheComputeDtypeAndLayout) {
  torch::manual_seed(5);
  const torch::Tensor labels = torch::randint(0, 4, {2, 5, 6, 7}, torch::kLong);
  const torch::Tensor ref = torch::one_hot(labels, 4).movedim(-1, 1);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor a = u3d::one_hot_labels(labels, 4, dtype);
    EXPECT_EQ(a.scalar_type(), dtype);
    EXPECT_TRUE(a.is_contiguous());
    EXPECT_TRUE(torch::equal(a.to(torch::kLong), ref));
  }
  const torch::Tensor cl =
      u3d::one_hot_labels(labels.to(torch::kUInt8), 4, torch::kFloat, at::MemoryFormat::ChannelsLast3d);
  EXPECT_TRUE(cl.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_TRUE(torch::equal(cl.to(torch::kLong), ref));
  EXPECT_ANY_THROW(u3d::one_hot_labels(labels + 1, 4));  // class 4 of 4
}

// The reference soft skeleton (clDice's soft_skeleton.py) with max_pool3d, as a test oracle.
torch::Tensor max_pool_skeleton(const torch::Tensor& x, int64_t iterations) {
  namespace F = torch::nn::functional;
  auto erode = [](const torch::Tensor& t) {
    const auto p1 = -F::max_pool3d(-t, F::MaxPool3dFuncOptions({3, 1, 1}).stride(1).padding({1, 0, 0}));
    const auto p2 = -F::max_pool3d(-t, F::MaxPool3dFuncOptions({1, 3, 1}).stride(1).padding({0, 1, 0}));
    const auto p3 = -F::max_pool3d(-t, F::MaxPool3dFuncOptions({1, 1, 3}).stride(1).padding({0, 0, 1}));
    return torch::minimum(torch::minimum(p1, p2), p3);
  };
  auto open = [&](const torch::Tensor& t) {
    return F::max_pool3d(erode(t), F::MaxPool3dFuncOptions(3).stride(1).padding(1));
  };
  // As soft_skel() writes it: img1 = soft_open(img); skel = relu(img - img1); then per iteration
  // img = soft_erode(img); img1 = soft_open(img); delta = relu(img - img1); skel += relu(delta - skel * delta).
  torch::Tensor img = x;
  torch::Tensor img1 = open(img);
  torch::Tensor skel = torch::relu(img - img1);
  for (int64_t j = 0; j < iterations; ++j) {
    img = erode(img);
    img1 = open(img);
    const torch::Tensor delta = torch::relu(img - img1);
    skel = skel + torch::relu(delta - skel * delta);
  }
  return skel;
}

TEST(TopologyLosses, SoftSkeletonByShiftsEqualsMaxPool) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::rand({2, 3, 6, 7, 8}, torch::requires_grad());
  const torch::Tensor a = max_pool_skeleton(x, /*iterations=*/3);
  const torch::Tensor b = u3d::soft_skeleton(x, /*iterations=*/3);
  EXPECT_TRUE(torch::equal(a, b));
  const torch::Tensor ga = torch::autograd::grad({a.sum()}, {x})[0];
  const torch::Tensor gb = torch::autograd::grad({b.sum()}, {x})[0];
  EXPECT_TRUE(torch::allclose(ga, gb, /*rtol=*/1e-5, /*atol=*/1e-6));  // random values do not tie
}

TEST(TopologyLosses, ClDicePerfectIsZeroMissedLineIsLarge) {
  const torch::Tensor labels = line_labels(7, 7, 1, 6);
  const torch::Tensor none;
  EXPECT_NEAR(u3d::cldice_loss(logits_for(labels, 2), labels, none).item<double>(), 0.0, 1e-4);
  const torch::Tensor missed = logits_for(torch::zeros_like(labels), 2);  // background everywhere
  // Empty prediction: tprec = smooth / smooth = 1, tsens = smooth / (5 + smooth) = 1/6 with smooth 1.
  const double tsens = 1.0 / 6.0;
  EXPECT_NEAR(u3d::cldice_loss(missed, labels, none).item<double>(), 1.0 - 2.0 * tsens / (1.0 + tsens), 1e-5);
  EXPECT_GT(u3d::cldice_loss(missed, labels, none, /*iterations=*/3, /*smooth=*/1e-5).item<double>(), 0.99);
}

TEST(TopologyLosses, SkeletonRecallOfHalfLineIsHalf) {
  const torch::Tensor labels = line_labels(5, 8, 1, 7);  // 6 voxels
  const torch::Tensor skel = u3d::skeleton_of_labels(labels, /*num_classes=*/2, /*iterations=*/3);
  ASSERT_EQ(skel.sizes(), (std::vector<int64_t>{1, 2, 5, 5, 8}));
  EXPECT_TRUE(torch::equal(skel.select(1, 1), labels.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(skel, (skel > 0.5).to(torch::kFloat)));
  EXPECT_FALSE(skel.requires_grad());
  const torch::Tensor half = logits_for(line_labels(5, 8, 1, 4), 2);  // covers 3 of the 6
  const torch::Tensor none;
  EXPECT_NEAR(u3d::skeleton_recall_loss(half, labels, none, 3, /*smooth=*/1e-6).item<double>(), 0.5, 1e-5);
  EXPECT_NEAR(u3d::skeleton_recall_loss(logits_for(labels, 2), labels, none, 3, 1e-6).item<double>(), 0.0, 1e-5);
}

TEST(TopologyLosses, TruncatedDistanceOfSingleVoxel) {
  torch::Tensor dot = torch::zeros({1, 1, 7, 7, 7});
  dot.index_put_({0, 0, 3, 3, 3}, 1.0);
  const torch::Tensor sdf = u3d::truncated_distance(dot, /*max_distance=*/8);
  EXPECT_EQ(at(sdf, {0, 0, 3, 3, 3}), -1.0f);
  EXPECT_EQ(at(sdf, {0, 0, 3, 3, 4}), 1.0f);
  EXPECT_EQ(at(sdf, {0, 0, 2, 4, 2}), 1.0f);
  EXPECT_EQ(at(sdf, {0, 0, 3, 5, 5}), 2.0f);
  EXPECT_EQ(at(sdf, {0, 0, 1, 3, 4}), 2.0f);
  EXPECT_EQ(at(sdf, {0, 0, 0, 0, 0}), 3.0f);
  EXPECT_EQ(at(sdf, {0, 0, 6, 3, 3}), 3.0f);
  EXPECT_EQ(sdf.max().item<float>(), 3.0f);
  const torch::Tensor capped = u3d::truncated_distance(dot, /*max_distance=*/2);
  EXPECT_EQ(at(capped, {0, 0, 0, 0, 0}), 2.0f);
  EXPECT_EQ(at(capped, {0, 0, 3, 3, 4}), 1.0f);
  EXPECT_EQ(at(capped, {0, 0, 3, 3, 3}), -1.0f);
  // A thick mask: -2 one voxel deeper than its boundary; empty and full masks are capped.
  torch::Tensor cube = torch::zeros({1, 1, 8, 8, 8});
  cube.index_put_({0, 0, Slice(2, 6), Slice(2, 6), Slice(2, 6)}, 1.0);
  const torch::Tensor c = u3d::truncated_distance(cube, 8);
  EXPECT_EQ(at(c, {0, 0, 2, 2, 2}), -1.0f);
  EXPECT_EQ(at(c, {0, 0, 3, 4, 3}), -2.0f);
  EXPECT_EQ(at(c, {0, 0, 0, 4, 4}), 2.0f);
  EXPECT_TRUE(
      torch::equal(u3d::truncated_distance(torch::zeros({1, 1, 3, 3, 3}), 5), torch::full({1, 1, 3, 3, 3}, 5.0)));
  EXPECT_TRUE(
      torch::equal(u3d::truncated_distance(torch::ones({1, 1, 3, 3, 3}), 5), torch::full({1, 1, 3, 3, 3}, -5.0)));
}

// Issue 35 (a sibling of the unbounded skeleton_iterations): training.boundary_distance far beyond
// the patch no longer means as many dilations per step; the steps past the largest edge are
// counted at once, with the same result as dilating every time.
TEST(TopologyLosses, TruncatedDistanceBeyondThePatchEqualsDilatingEveryStep) {
  torch::manual_seed(3);
  const torch::Tensor mask = (torch::rand({2, 1, 6, 7, 5}) > 0.8).to(torch::kFloat);
  const auto by_every_step = [](const torch::Tensor& m, int64_t max_distance) {
    const auto steps = [&](const torch::Tensor& seed) {
      torch::Tensor reached = seed, d = torch::ones_like(seed);
      for (int64_t k = 1; k < max_distance; ++k) {
        reached = u3d::soft_dilate(reached);
        d = d + (1.0 - reached);
      }
      return d;
    };
    return steps(m) * (1.0 - m) - steps(1.0 - m) * m;
  };
  for (const torch::Tensor& m : {mask, torch::zeros_like(mask), torch::ones_like(mask)}) {
    for (int64_t max_distance : {1, 3, 7, 8, 40}) {
      EXPECT_TRUE(torch::equal(u3d::truncated_distance(m, max_distance), by_every_step(m, max_distance)))
          << "max_distance " << max_distance;
    }
  }
}

TEST(TopologyLosses, BoundaryLossPrefersTheCorrectPrediction) {
  torch::Tensor labels = torch::zeros({1, 8, 8, 8}, torch::kLong);
  labels.index_put_({0, Slice(2, 6), Slice(2, 6), Slice(2, 6)}, 1);
  const torch::Tensor none;
  const double correct = u3d::boundary_loss(logits_for(labels, 2), labels, none).item<double>();
  // 4^3 cube: 56 boundary voxels at -1, 8 inner at -2, over max_distance 8 and 512 voxels.
  EXPECT_NEAR(correct, -72.0 / 8.0 / 512.0, 1e-6);
  const torch::Tensor shifted = logits_for(labels.roll(/*shifts=*/2, /*dims=*/1), 2);
  EXPECT_LT(correct, u3d::boundary_loss(shifted, labels, none).item<double>());
  EXPECT_LT(correct, u3d::boundary_loss(logits_for(torch::ones_like(labels), 2), labels, none).item<double>());
}

TEST(TopologyLosses, InvalidVoxelsChangeNothing) {
  const RandomCase c = random_case(7);
  const torch::Tensor other_logits = torch::where(c.valid.unsqueeze(1), c.logits, torch::randn_like(c.logits) * 30.0);
  const torch::Tensor other_labels = c.labels.masked_fill(c.valid.logical_not(), 3);  // ignore value K
  const torch::Tensor clean = c.labels.masked_fill(c.valid.logical_not(), 0);
  for (const auto& [name, loss] : all_losses()) {
    SCOPED_TRACE(name);
    const double a = loss(c.logits, c.labels, c.valid).item<double>();
    EXPECT_TRUE(std::isfinite(a));
    EXPECT_NEAR(loss(other_logits, c.labels, c.valid).item<double>(), a, 1e-6);
    EXPECT_NEAR(loss(c.logits, other_labels, c.valid).item<double>(), a, 1e-6);
    // The mask matters: without it the same logits and (background) labels give another value. Not
    // for Skeleton Recall: its sums only see the ground truth's skeleton, 0 on background anyway.
    if (name != "skeleton_recall") EXPECT_GT(std::abs(loss(c.logits, clean, torch::Tensor()).item<double>() - a), 1e-4);
  }
}

TEST(TopologyLosses, AllValidEqualsUnmasked) {
  RandomCase c = random_case(11);
  c.labels = c.labels.masked_fill(c.valid.logical_not(), 1);
  const torch::Tensor all = torch::ones_like(c.valid);
  for (const auto& [name, loss] : all_losses()) {
    SCOPED_TRACE(name);
    EXPECT_NEAR(loss(c.logits, c.labels, all).item<double>(), loss(c.logits, c.labels, torch::Tensor()).item<double>(),
                1e-6);
  }
}

TEST(TopologyLosses, WeightedCrossEntropyHasPyTorchSemantics) {
  RandomCase c = random_case(5);
  const torch::Tensor clean = c.labels.masked_fill(c.valid.logical_not(), 2);
  const torch::Tensor none;
  const double ce = u3d::cross_entropy_loss(c.logits, clean).item<double>();
  EXPECT_NEAR(u3d::weighted_cross_entropy(c.logits, clean, none, {}).item<double>(), ce, 1e-5);
  EXPECT_NEAR(u3d::weighted_cross_entropy(c.logits, clean, none, {1.0, 1.0, 1.0}).item<double>(), ce, 1e-5);
  EXPECT_NEAR(u3d::weighted_cross_entropy(c.logits, clean, torch::ones_like(c.valid), {}).item<double>(), ce, 1e-5);
  // Against F.cross_entropy with weight= and ignore_index (CPU).
  namespace F = torch::nn::functional;
  const std::vector<double> w{0.2, 1.5, 3.0};
  const double expected =
      F::cross_entropy(c.logits, c.labels,
                       F::CrossEntropyFuncOptions().weight(torch::tensor({0.2f, 1.5f, 3.0f})).ignore_index(255))
          .item<double>();
  EXPECT_NEAR(u3d::weighted_cross_entropy(c.logits, c.labels, c.valid, w).item<double>(), expected, 1e-5);
  // bf16 logits (autocast) are computed in float32: the same value as their float32 copy.
  const torch::Tensor bf = c.logits.to(torch::kBFloat16);
  EXPECT_EQ(u3d::weighted_cross_entropy(bf, c.labels, c.valid, w).scalar_type(), torch::kFloat);
  EXPECT_NEAR(u3d::weighted_cross_entropy(bf, c.labels, c.valid, w).item<double>(),
              u3d::weighted_cross_entropy(bf.to(torch::kFloat), c.labels, c.valid, w).item<double>(), 1e-6);
  // No valid voxel: 0, not NaN.
  EXPECT_EQ(u3d::weighted_cross_entropy(c.logits, c.labels, torch::zeros_like(c.valid), w).item<double>(), 0.0);
  EXPECT_THROW(u3d::weighted_cross_entropy(c.logits, clean, none, {1.0, 2.0}), ConfigError);
}

TEST(TopologyLosses, MaskedSoftDiceByHandAndUnmasked) {
  // As Losses.SoftDiceByHand: p(class 1) = 0.75 and 0.25 on two voxels labelled 1 and 0.
  const double l = std::log(3.0);
  const torch::Tensor logits = torch::tensor({0.0, 0.0, l, -l}, torch::kFloat).view({1, 2, 1, 1, 2});
  const torch::Tensor labels = torch::tensor({1, 0}, torch::kLong).view({1, 1, 1, 2});
  const double s = 1e-5;
  const double unmasked = u3d::soft_dice_loss(logits, labels, s).item<double>();
  EXPECT_NEAR(u3d::masked_soft_dice_loss(logits, labels, torch::Tensor(), s).item<double>(), unmasked, 1e-7);
  // The second voxel invalid: inter 0.75, sum p 0.75, sum y 1.
  const torch::Tensor valid = torch::tensor({true, false}).view({1, 1, 1, 2});
  EXPECT_NEAR(u3d::masked_soft_dice_loss(logits, labels, valid, s).item<double>(), 1.0 - (1.5 + s) / (1.75 + s), 1e-6);
  const RandomCase c = random_case(9);
  const torch::Tensor clean = c.labels.masked_fill(c.valid.logical_not(), 0);
  EXPECT_NEAR(u3d::masked_soft_dice_loss(c.logits, clean, torch::Tensor()).item<double>(),
              u3d::soft_dice_loss(c.logits, clean).item<double>(), 1e-6);
}

TEST(TopologyLosses, GradientsFlowAndSkipInvalidVoxels) {
  const RandomCase c = random_case(13);
  const torch::Tensor invalid = c.valid.logical_not().unsqueeze(1).expand_as(c.logits);
  for (const auto& [name, loss] : all_losses()) {
    SCOPED_TRACE(name);
    const torch::Tensor logits = c.logits.clone().requires_grad_(true);
    loss(logits, c.labels, c.valid).backward();
    const torch::Tensor g = logits.grad();
    ASSERT_TRUE(g.defined());
    EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
    EXPECT_GT(g.abs().sum().item<double>(), 0.0);
    EXPECT_EQ(g.masked_select(invalid).abs().sum().item<double>(), 0.0);
  }
}

TEST(TopologyLosses, OnCudaEqualsCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const RandomCase c = random_case(17);
  const torch::Device gpu(torch::kCUDA);
  const auto compare = [&](const char* what) {
    for (const auto& [name, loss] : all_losses()) {
      SCOPED_TRACE(std::string(what) + " " + name);
      const torch::Tensor cpu_logits = c.logits.clone().requires_grad_(true);
      const torch::Tensor cuda_logits = c.logits.to(gpu).requires_grad_(true);
      const torch::Tensor a = loss(cpu_logits, c.labels, c.valid);
      const torch::Tensor b = loss(cuda_logits, c.labels.to(gpu), c.valid.to(gpu));
      EXPECT_TRUE(b.is_cuda());
      EXPECT_NEAR(b.item<double>(), a.item<double>(), 1e-5);
      a.backward();
      b.backward();
      EXPECT_TRUE(torch::allclose(cuda_logits.grad().cpu(), cpu_logits.grad(), /*rtol=*/1e-4, /*atol=*/1e-6));
    }
  };
  compare("default");
  // Under deterministic algorithms the morphology pools by shifts (max_pool3d's CUDA backward would throw).
  struct DeterministicOn {
    bool was = at::globalContext().deterministicAlgorithms();
    DeterministicOn() { at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false); }
    ~DeterministicOn() { at::globalContext().setDeterministicAlgorithms(was, /*warn_only=*/false); }
  } deterministic;
  compare("deterministic");
}

}  // namespace
}  // namespace u3d
