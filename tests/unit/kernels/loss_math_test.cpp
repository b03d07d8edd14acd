// The arithmetic of the fused loss kernels (kernels/loss_math.h), run on the host in the kernels'
// way (the per-sample table of sums voxel by voxel, the loss composed from the table in ATen as
// Loss::parts does, dx voxel by voxel from the table's gradient) against ATen's autograd of
// u3d::cross_entropy_loss + u3d::soft_dice_loss and u3d::sigmoid_bce_loss + u3d::sigmoid_dice_loss,
// with weights on the two terms: the value and the logits' gradient. The CUDA grid itself is checked
// on a GPU (tests/gpu/fused_loss_test.cpp); this checks the formulas it runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "tensor_compare.h"
#include "u3d/kernels/loss_math.h"
#include "u3d/train/losses.h"

namespace u3d::kernels {
namespace {

struct LossCase {
  std::vector<int64_t> shape;  // logits (N, C, D, H, W)
  bool sigmoid;                // C = K - 1 channels; else C = K classes
  double w_ce, w_dice;         // the terms' weights
};

struct LossResult {
  torch::Tensor loss, dx;  // dx (N, C, S)
};

// What the kernels compute, on (N, C, S) float32 logits and (N, S) labels. `drop` leaves out the
// Dice part of dx (the test's own check that it sees a wrong backward).
LossResult emulate_loss(const LossCase& k, const torch::Tensor& x, const torch::Tensor& labels, bool drop = false) {
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const RegionColumns cols{c};
  const auto X = x.accessor<float, 3>();
  const auto L = labels.accessor<int64_t, 2>();
  torch::Tensor table = torch::zeros({n, cols.width()});
  auto T = table.accessor<float, 2>();
  const auto lse_of = [&](int64_t i, int64_t v) {
    float m = X[i][0][v], e = 0.f;
    for (int64_t q = 1; q < c; ++q) m = softmax_shift(m, X[i][q][v]);
    for (int64_t q = 0; q < c; ++q) e += std::exp(X[i][q][v] - m);
    return softmax_lse(m, e);
  };
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < s; ++v) {
      const int64_t label = L[i][v];
      const float lse = k.sigmoid ? 0.f : lse_of(i, v);
      float x_label = 0.f;
      for (int64_t q = 0; q < c; ++q) {
        const float xq = X[i][q][v], y = region_target(label, q, k.sigmoid);
        const float p = k.sigmoid ? sigmoid_prob(xq) : softmax_prob(xq, lse);
        T[i][cols.inter(q)] += p * y;
        T[i][cols.psum(q)] += p;
        T[i][cols.ysum(q)] += y;
        if (k.sigmoid) T[i][cols.ce()] += sigmoid_bce(xq, y);
        if (y != 0.f) x_label = xq;
      }
      if (!k.sigmoid) T[i][cols.ce()] += softmax_ce(lse, x_label, /*label_valid=*/label >= 0 && label < c);
    }
  }
  // The loss from the table, as Loss::parts composes it; its gradient is what the backward kernel reads.
  table.requires_grad_();
  const double count = static_cast<double>(k.sigmoid ? n * c * s : n * s);
  const torch::Tensor ce = table.select(/*dim=*/1, cols.ce()).sum() / count;
  const torch::Tensor denom = table.narrow(/*dim=*/1, cols.psum(0), c) + table.narrow(1, cols.ysum(0), c).detach();
  const torch::Tensor dice =
      dice_loss_from_sums(table.narrow(/*dim=*/1, cols.inter(0), c), denom, kDiceSmooth, k.sigmoid ? 0 : 1);
  LossResult r;
  r.loss = ce * k.w_ce + dice * k.w_dice;
  r.loss.backward();
  const torch::Tensor grad = drop ? table.grad() * (torch::arange(cols.width()) == cols.ce()) : table.grad();
  const auto G = grad.accessor<float, 2>();
  r.dx = torch::empty_like(x);
  auto DX = r.dx.accessor<float, 3>();
  for (int64_t i = 0; i < n; ++i) {
    const float g_ce = G[i][cols.ce()];
    for (int64_t v = 0; v < s; ++v) {
      const int64_t label = L[i][v];
      if (k.sigmoid) {
        for (int64_t q = 0; q < c; ++q) {
          const float y = region_target(label, q, /*sigmoid=*/true);
          DX[i][q][v] = sigmoid_dx(sigmoid_prob(X[i][q][v]), y, G[i][cols.inter(q)], G[i][cols.psum(q)], g_ce);
        }
        continue;
      }
      const float lse = lse_of(i, v);
      float pa = 0.f;
      for (int64_t q = 0; q < c; ++q) {
        const float y = region_target(label, q, /*sigmoid=*/false);
        pa += softmax_grad_weight(y, G[i][cols.inter(q)], G[i][cols.psum(q)]) * softmax_prob(X[i][q][v], lse);
      }
      for (int64_t q = 0; q < c; ++q) {
        const float y = region_target(label, q, /*sigmoid=*/false);
        const float a = softmax_grad_weight(y, G[i][cols.inter(q)], G[i][cols.psum(q)]);
        DX[i][q][v] = softmax_dx(softmax_prob(X[i][q][v], lse), y, a, pa, g_ce);
      }
    }
  }
  return r;
}

struct LossCompared {
  double loss, dx;  // relative differences to ATen
};

LossCompared compare_loss(const LossCase& k, bool drop = false) {
  torch::manual_seed(17);
  const int64_t n = k.shape[0], c = k.shape[1];
  const torch::Tensor x5 = torch::randn(k.shape) * 2;
  std::vector<int64_t> label_shape = {n};
  label_shape.insert(label_shape.end(), k.shape.begin() + 2, k.shape.end());
  const torch::Tensor labels = torch::randint(/*high=*/k.sigmoid ? c + 1 : c, label_shape, torch::kLong);
  // ATen, float32 (the losses compute in float32).
  const torch::Tensor xr = x5.clone().requires_grad_();
  const torch::Tensor ref =
      k.sigmoid ? u3d::sigmoid_bce_loss(xr, labels) * k.w_ce + u3d::sigmoid_dice_loss(xr, labels) * k.w_dice
                : u3d::cross_entropy_loss(xr, labels) * k.w_ce + u3d::soft_dice_loss(xr, labels) * k.w_dice;
  ref.backward();
  const LossResult r = emulate_loss(k, x5.reshape({n, c, -1}), labels.reshape({n, -1}), drop);
  return {test::rel_diff(r.loss.detach(), ref.detach()), test::rel_diff(r.dx, xr.grad().reshape({n, c, -1}))};
}

void check_loss(const LossCase& k) {
  SCOPED_TRACE(::testing::Message() << (k.sigmoid ? "sigmoid" : "softmax") << " " << k.shape[0] << "x" << k.shape[1]
                                    << "x" << k.shape[2] << "x" << k.shape[3] << "x" << k.shape[4] << " weights "
                                    << k.w_ce << ", " << k.w_dice);
  const LossCompared d = compare_loss(k);
  EXPECT_LT(d.loss, 1e-5);
  EXPECT_LT(d.dx, 1e-4);
}

TEST(LossMath, SoftmaxCrossEntropyPlusDiceEqualsAten) {
  check_loss({{2, 3, 5, 7, 3}, /*sigmoid=*/false, 1.0, 1.0});
  check_loss({{1, 2, 9, 4, 5}, /*sigmoid=*/false, 0.7, 1.6});  // batch 1, two classes, weighted terms
  check_loss({{2, 5, 3, 3, 11}, /*sigmoid=*/false, 2.0, 0.5});
  check_loss({{1, 5, 1, 13, 7}, /*sigmoid=*/false, 1.0, 1.0});  // a 2-D slice
}

TEST(LossMath, SigmoidBcePlusDiceEqualsAten) {
  check_loss({{2, 1, 5, 7, 3}, /*sigmoid=*/true, 1.0, 1.0});
  check_loss({{1, 3, 9, 4, 5}, /*sigmoid=*/true, 0.3, 1.7});
  check_loss({{2, 3, 1, 11, 6}, /*sigmoid=*/true, 1.0, 1.0});
}

TEST(LossMath, ABackwardWithoutItsDicePartIsCaught) {
  for (bool sigmoid : {false, true}) {
    const LossCase k{{2, 3, 5, 7, 3}, sigmoid, 1.0, 1.0};
    EXPECT_LT(compare_loss(k).dx, 1e-4);
    EXPECT_GT(compare_loss(k, /*drop=*/true).dx, 1e-2) << (sigmoid ? "sigmoid" : "softmax");
  }
}

TEST(LossMath, ColumnsAndTargets) {
  const RegionColumns cols{5};
  EXPECT_EQ(cols.width(), 16);
  EXPECT_EQ(cols.psum(0), 5);
  EXPECT_EQ(cols.ysum(4), 14);
  EXPECT_EQ(cols.ce(), 15);
  EXPECT_EQ(region_target(/*label=*/2, /*k=*/2, /*sigmoid=*/false), 1.f);
  EXPECT_EQ(region_target(/*label=*/2, /*k=*/1, /*sigmoid=*/true), 1.f);  // channel c is label c + 1
  EXPECT_EQ(region_target(/*label=*/0, /*k=*/0, /*sigmoid=*/true), 0.f);  // background is no channel
  EXPECT_EQ(softmax_ce(/*lse=*/3.f, /*x_label=*/1.f, /*label_valid=*/false), 0.f);
  EXPECT_NEAR(sigmoid_bce(/*x=*/-100.f, /*y=*/0.f), 0.f, 1e-6);  // stable at large |x|
  EXPECT_NEAR(sigmoid_bce(/*x=*/100.f, /*y=*/0.f), 100.f, 1e-4);
}

}  // namespace
}  // namespace u3d::kernels
