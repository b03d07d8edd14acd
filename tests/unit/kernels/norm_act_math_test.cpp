// The arithmetic of the fused norm + activation kernels (kernels/norm_act_math.h), run on the host in
// the kernels' order (moments per chunk, merged per channel, per unit; gradient sums the same way;
// then the element-wise passes) against ATen's group norm, instance norm and batch norm with the
// activation: outputs, dx, dweight, dbias and batch norm's running statistics. The CUDA grid itself
// is checked on a GPU (tests/gpu/fused_norm_act_test.cpp); this checks the formulas it runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "u3d/kernels/norm_act_math.h"

namespace u3d::kernels {
namespace {

struct Case {
  int64_t n, c, s, groups;  // groups 0: batch norm
  double slope;             // relu 0, leaky 0.01, none 1
  int64_t chunks;
};

struct Result {
  torch::Tensor y, dx, dweight, dbias, running_mean, running_var;
};

// The kernels' algorithm on (N, S, C) float32 host tensors.
Result emulate(const Case& k, const torch::Tensor& x, const torch::Tensor& dy, const torch::Tensor& weight,
               const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var, float momentum) {
  const bool batch = k.groups == 0;
  const int64_t n = k.n, c = k.c, s = k.s, units = batch ? c : n * k.groups, cg = batch ? 1 : c / k.groups;
  const auto X = x.accessor<float, 3>(), DY = dy.accessor<float, 3>();
  const auto W = weight.accessor<float, 1>(), B = bias.accessor<float, 1>();
  const int64_t per = (s + k.chunks - 1) / k.chunks;
  // Moments per (n, c): chunks, then merged over the chunks in order.
  std::vector<Moments> channel(static_cast<size_t>(n * c));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t chunk = 0; chunk < k.chunks; ++chunk) {
        Moments m;
        for (int64_t v = chunk * per; v < std::min(s, (chunk + 1) * per); ++v) moments_add(m, X[i][v][ch]);
        channel[static_cast<size_t>(i * c + ch)] = moments_merge(channel[static_cast<size_t>(i * c + ch)], m);
      }
    }
  }
  // Per unit: the affine of each (n, c) (batch norm: the same for every n).
  std::vector<ChannelAffine> affine(static_cast<size_t>(n * c));
  for (int64_t u = 0; u < units; ++u) {
    Moments m;
    if (batch) {
      for (int64_t i = 0; i < n; ++i) m = moments_merge(m, channel[static_cast<size_t>(i * c + u)]);
      if (running_mean.defined()) {
        running_mean[u] = (1 - momentum) * running_mean[u].item<float>() + momentum * m.mean;
        running_var[u] = (1 - momentum) * running_var[u].item<float>() + momentum * unbiased_var(m);
      }
      for (int64_t i = 0; i < n; ++i) affine[static_cast<size_t>(i * c + u)] = channel_affine(m, 1e-5f, W[u], B[u]);
      continue;
    }
    const int64_t i = u / k.groups, first = (u % k.groups) * cg;
    for (int64_t q = 0; q < cg; ++q) m = moments_merge(m, channel[static_cast<size_t>(i * c + first + q)]);
    for (int64_t q = 0; q < cg; ++q) {
      affine[static_cast<size_t>(i * c + first + q)] = channel_affine(m, 1e-5f, W[first + q], B[first + q]);
    }
  }
  Result r;
  r.y = torch::empty_like(x);
  auto Y = r.y.accessor<float, 3>();
  std::vector<GradSums> sums(static_cast<size_t>(n * c));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < s; ++v) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const ChannelAffine& a = affine[static_cast<size_t>(i * c + ch)];
        Y[i][v][ch] = activate(X[i][v][ch] * a.scale + a.shift, static_cast<float>(k.slope));
        grad_sums_add(sums[static_cast<size_t>(i * c + ch)], DY[i][v][ch], X[i][v][ch], a, static_cast<float>(k.slope));
      }
    }
  }
  // Coefficients per unit, parameter gradients per channel.
  std::vector<DxCoefficients> coef(static_cast<size_t>(n * c));
  r.dweight = torch::zeros({c});
  r.dbias = torch::zeros({c});
  for (int64_t u = 0; u < units; ++u) {
    const int64_t i0 = batch ? 0 : u / k.groups, first = batch ? u : (u % k.groups) * cg;
    float a = 0, b = 0;
    for (int64_t i = batch ? 0 : i0; i < (batch ? n : i0 + 1); ++i) {
      for (int64_t q = 0; q < cg; ++q) {
        const size_t at = static_cast<size_t>(i * c + first + q);
        a += W[first + q] * sums[at].g;
        b += W[first + q] * affine[at].rstd * sums[at].gxc;
      }
    }
    const float count = static_cast<float>(batch ? n * s : s * cg);
    for (int64_t i = batch ? 0 : i0; i < (batch ? n : i0 + 1); ++i) {
      for (int64_t q = 0; q < cg; ++q) {
        const size_t at = static_cast<size_t>(i * c + first + q);
        coef[at] = dx_coefficients(affine[at], W[first + q], a / count, b / count);
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t at = static_cast<size_t>(i * c + ch);
      r.dweight[ch] += affine[at].rstd * sums[at].gxc;
      r.dbias[ch] += sums[at].g;
    }
  }
  r.dx = torch::empty_like(x);
  auto DX = r.dx.accessor<float, 3>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t v = 0; v < s; ++v) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const size_t at = static_cast<size_t>(i * c + ch);
        DX[i][v][ch] = dx_value(DY[i][v][ch], X[i][v][ch], affine[at], coef[at], static_cast<float>(k.slope));
      }
    }
  }
  r.running_mean = running_mean;
  r.running_var = running_var;
  return r;
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-12);
}

void check(const Case& k) {
  SCOPED_TRACE(::testing::Message() << "n " << k.n << " c " << k.c << " s " << k.s << " groups " << k.groups
                                    << " slope " << k.slope << " chunks " << k.chunks);
  torch::manual_seed(7);
  const torch::Tensor x5 = torch::randn({k.n, k.c, k.s, 1, 1}) * 2 + 3;  // an offset mean tests the centering
  const torch::Tensor dy5 = torch::randn({k.n, k.c, k.s, 1, 1});
  const torch::Tensor weight = torch::rand({k.c}) + 0.5, bias = torch::randn({k.c});
  // ATen reference, float64.
  torch::Tensor xr = x5.to(torch::kDouble).requires_grad_(), wr = weight.to(torch::kDouble).requires_grad_();
  torch::Tensor br = bias.to(torch::kDouble).requires_grad_();
  torch::Tensor rm_ref = torch::zeros({k.c}, torch::kDouble), rv_ref = torch::ones({k.c}, torch::kDouble);
  const torch::Tensor z = k.groups == 0 ? torch::batch_norm(xr, wr, br, rm_ref, rv_ref, true, 0.1, 1e-5, false)
                                        : torch::group_norm(xr, k.groups, wr, br, 1e-5, false);
  const torch::Tensor yr = torch::where(z > 0, z, z * k.slope);
  yr.backward(dy5.to(torch::kDouble));
  // The kernels' algorithm, float32, (N, S, C).
  const auto nsc = [](const torch::Tensor& t) { return t.squeeze(-1).squeeze(-1).permute({0, 2, 1}).contiguous(); };
  torch::Tensor rm = torch::zeros({k.c}), rv = torch::ones({k.c});
  const Result r = emulate(k, nsc(x5), nsc(dy5), weight, bias, k.groups == 0 ? rm : torch::Tensor(),
                           k.groups == 0 ? rv : torch::Tensor(), 0.1f);
  EXPECT_LT(rel(r.y, nsc(yr.detach().to(torch::kFloat))), 1e-5);
  EXPECT_LT(rel(r.dx, nsc(xr.grad().to(torch::kFloat))), 1e-4);
  EXPECT_LT(rel(r.dweight, wr.grad().to(torch::kFloat)), 1e-4);
  EXPECT_LT(rel(r.dbias, br.grad().to(torch::kFloat)), 1e-4);
  if (k.groups == 0) {
    EXPECT_LT(rel(r.running_mean, rm_ref.to(torch::kFloat)), 1e-5);
    EXPECT_LT(rel(r.running_var, rv_ref.to(torch::kFloat)), 1e-5);
  }
}

TEST(NormActMath, BatchNormWithReluLeakyReluAndNoneEqualsAten) {
  for (double slope : {0.0, 0.01, 1.0}) check({3, 5, 37, /*groups=*/0, slope, /*chunks=*/4});
  check({1, 8, 64, 0, 0.2, 1});  // batch 1, one chunk
}

TEST(NormActMath, InstanceNormEqualsAten) {
  for (double slope : {0.0, 0.01}) check({2, 6, 45, /*groups=*/6, slope, /*chunks=*/3});
}

TEST(NormActMath, GroupNormEqualsAten) {
  check({2, 12, 50, /*groups=*/4, 0.01, /*chunks=*/7});
  check({3, 9, 11, /*groups=*/3, 0.0, /*chunks=*/11});  // a chunk per voxel
}

TEST(NormActMath, MomentsMergeInAnyGroupingGiveTheWholeSetsMoments) {
  const std::vector<float> values = {3.f, -1.f, 7.5f, 2.f, 2.f, 100.f, -40.f};
  Moments whole, left, right;
  for (float v : values) moments_add(whole, v);
  for (size_t i = 0; i < 3; ++i) moments_add(left, values[i]);
  for (size_t i = 3; i < values.size(); ++i) moments_add(right, values[i]);
  const Moments merged = moments_merge(left, right);
  EXPECT_FLOAT_EQ(merged.count, whole.count);
  EXPECT_NEAR(merged.mean, whole.mean, 1e-5);
  EXPECT_NEAR(merged.m2, whole.m2, 1e-2);
  EXPECT_EQ(moments_merge(Moments{}, left).mean, left.mean);  // an empty side changes nothing
  EXPECT_EQ(unbiased_var(Moments{1.f, 2.f, 0.f}), 0.f);       // one value: no variance
}

}  // namespace
}  // namespace u3d::kernels
