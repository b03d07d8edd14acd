// cuDNN's fused norm + activation graphs (kernels/cudnn_norm_act.h) on CUDA against ATen in float64, and
// `trainer bench-norm` (app/norm_benchmark.h) timing ATen, the project's kernels and cuDNN's graphs on
// one GPU. cuDNN may refuse a pattern (a LeakyReLU fused with a norm, a 5-D instance norm): the refusal
// must be cuDNN's own words, one line; a graph it builds must equal ATen. A test that finds no CUDA
// device skips; one that finds a build without cuDNN graphs fails (the GPU box runs the bundle, which has
// them).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <fstream>

#include "devices.h"
#include "tensor_compare.h"
#include "test_support.h"
#include "u3d/app/norm_benchmark.h"
#include "u3d/core/errors.h"
#include "u3d/core/json.h"
#include "u3d/kernels/cudnn_norm_act.h"

namespace u3d {
namespace {

#define U3D_REQUIRE_CUDNN_GRAPHS()                                    \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"; \
  ASSERT_TRUE(kernels::cudnn_graphs_built()) << "this build has no cuDNN graphs (kernels/cudnn_norm_act.h)"

struct CudnnCase {
  kernels::CudnnNorm norm;
  std::array<int64_t, 5> shape;
  torch::ScalarType dtype;
  double slope;  // relu 0, leaky_relu its slope, none 1
};

double cudnn_tolerance(torch::ScalarType t) { return t == torch::kBFloat16 ? 3e-2 : t == torch::kHalf ? 5e-3 : 1e-4; }

// cuDNN's graphs against ATen's composition in float64 on the same values: y, dx, dweight, dbias, and
// batch norm's running averages. False when cuDNN refused the graphs (its words in `refusal`).
bool check_cudnn_case(const CudnnCase& k, std::string* refusal) {
  kernels::CudnnNormActSpec spec;
  spec.norm = k.norm;
  spec.shape = k.shape;
  spec.dtype = k.dtype;
  spec.act = kernels::FusedActivation{k.slope};
  spec.eps = 1e-3;
  spec.momentum = 0.1;
  std::unique_ptr<kernels::CudnnNormAct> graphs;
  try {
    graphs = std::make_unique<kernels::CudnnNormAct>(spec);
  } catch (const TrainingError& e) {
    *refusal = e.what();
    return false;
  }
  const bool batch = k.norm == kernels::CudnnNorm::kBatch;
  const int64_t c = k.shape[1];
  const auto f32 = torch::TensorOptions().device(test::kCuda).dtype(torch::kFloat);
  const auto x = (torch::randn({k.shape[0], c, k.shape[2], k.shape[3], k.shape[4]}, f32) * 2 + 0.5)
                     .to(k.dtype)
                     .contiguous(test::kCl);
  const auto dy = torch::randn_like(x).contiguous(test::kCl);
  const auto w = 1 + 0.1 * torch::randn({c}, f32), b = 0.1 * torch::randn({c}, f32);

  std::array<torch::Tensor, 2> in{torch::zeros({c}, f32), torch::ones({c}, f32)};
  std::array<torch::Tensor, 2> out{torch::empty({c}, f32), torch::empty({c}, f32)};
  kernels::CudnnNormStats stats;
  const auto y = graphs->forward(x, w, b, stats, in, out);
  const auto g = graphs->backward(dy, x, y, w, stats);
  EXPECT_TRUE(y.is_contiguous(test::kCl) && g.dx.is_contiguous(test::kCl));

  const auto xd = x.to(torch::kDouble).requires_grad_();
  const auto wd = w.to(torch::kDouble).requires_grad_(), bd = b.to(torch::kDouble).requires_grad_();
  auto rm = torch::zeros({c}, xd.options()), rv = torch::ones({c}, xd.options());
  const auto z = batch ? torch::batch_norm(xd, wd, bd, rm, rv, true, 0.1, 1e-3, false)
                       : torch::instance_norm(xd, wd, bd, {}, {}, true, 0.1, 1e-3, false);
  const auto yd = k.slope == 1.0 ? z : torch::where(z > 0, z, z * k.slope);
  yd.backward(dy.to(torch::kDouble));
  const double tol = cudnn_tolerance(k.dtype);
  EXPECT_LT(test::rel_diff(y, yd.detach()), tol) << "y";
  EXPECT_LT(test::rel_diff(g.dx, xd.grad()), tol) << "dx";
  EXPECT_LT(test::rel_diff(g.dweight, wd.grad()), tol) << "dweight";
  EXPECT_LT(test::rel_diff(g.dbias, bd.grad()), tol) << "dbias";
  if (batch) {
    EXPECT_LT(test::rel_diff(out[0], rm), tol) << "running mean";
    EXPECT_LT(test::rel_diff(out[1], rv), 2 * tol) << "running var";
  }
  return true;
}

TEST(CudnnNormAct, BatchNormReluInHalfEqualsAten) {
  U3D_REQUIRE_CUDNN_GRAPHS();
  torch::manual_seed(0);
  std::string refusal;
  // cudnn-frontend's own sample pattern (NHWC fp16 batch norm + ReLU): cuDNN 9 must take it.
  EXPECT_TRUE(check_cudnn_case({kernels::CudnnNorm::kBatch, {8, 32, 1, 16, 16}, torch::kHalf, 0.0}, &refusal))
      << refusal;
}

TEST(CudnnNormAct, EveryNetworksPatternEqualsAtenOrIsRefusedInCudnnsWords) {
  U3D_REQUIRE_CUDNN_GRAPHS();
  torch::manual_seed(0);
  const std::vector<std::pair<const char*, CudnnCase>> cases = {
      {"OpenKBP down (batch, leaky 0.2, bf16)", {kernels::CudnnNorm::kBatch, {2, 16, 8, 8, 8}, torch::kBFloat16, 0.2}},
      {"OpenKBP up (batch, relu, bf16)", {kernels::CudnnNorm::kBatch, {2, 16, 8, 8, 8}, torch::kBFloat16, 0.0}},
      {"MLPerf (instance, relu, bf16)", {kernels::CudnnNorm::kInstance, {2, 32, 8, 8, 8}, torch::kBFloat16, 0.0}},
      {"nnU-Net (instance, leaky 0.01, bf16)",
       {kernels::CudnnNorm::kInstance, {2, 32, 8, 8, 8}, torch::kBFloat16, 0.01}},
      {"2D slices (batch, relu, fp16)", {kernels::CudnnNorm::kBatch, {16, 32, 1, 32, 32}, torch::kHalf, 0.0}},
      {"residual (instance, none, fp32)", {kernels::CudnnNorm::kInstance, {1, 13, 5, 6, 7}, torch::kFloat, 1.0}},
  };
  for (const auto& [name, k] : cases) {
    SCOPED_TRACE(name);
    std::string refusal;
    if (!check_cudnn_case(k, &refusal)) {
      EXPECT_EQ(refusal.rfind("cuDNN graph (", 0), 0u) << refusal;
      EXPECT_EQ(refusal.find('\n'), std::string::npos) << refusal;
      std::printf("%s: refused by cuDNN: %s\n", name, refusal.c_str());
    } else {
      std::printf("%s: built, equals ATen\n", name);
    }
  }
}

TEST(NormBench, TimesAtenOursAndCudnnOnOneGpu) {
  U3D_REQUIRE_CUDNN_GRAPHS();
  test::TempDir dir;
  const auto sites = dir / "sites.json";
  std::ofstream(sites) << R"({"precision": "bf16", "sites": [
      {"norm": "batch", "shape": [2, 16, 8, 8, 8], "activation": "relu", "eps": 1e-3, "momentum": 0.01, "count": 3},
      {"norm": "instance", "shape": [2, 32, 4, 4, 4], "activation": "leaky_relu", "negative_slope": 0.01}]})";
  NormBenchCommand cmd;
  cmd.sites = sites.string();
  cmd.steps = 3;
  cmd.warmup = 1;
  testing::internal::CaptureStdout();
  const int rc = norm_benchmark_command(cmd);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  const Json j = parse_json(out, "bench-norm's stdout");
  EXPECT_EQ(j["device"], "cuda");
  EXPECT_EQ(j["layers"], 4);
  ASSERT_EQ(j["sites"].size(), 2u);
  for (const auto& site : j["sites"]) {
    EXPECT_EQ(site["aten"]["status"], "ok");
    EXPECT_GT(site["aten"]["fwd_bwd_ms"].get<double>(), 0.0);
    EXPECT_EQ(site["ours"]["status"], "ok") << site["ours"]["status"];
    EXPECT_GT(site["ours"]["fwd_bwd_ms"].get<double>(), 0.0);
    EXPECT_LT(site["ours"]["dx_diff"].get<double>(), 3e-2);
    const std::string cudnn = site["cudnn"]["status"];
    if (cudnn == "ok") {
      EXPECT_LT(site["cudnn"]["dx_diff"].get<double>(), 3e-2);
    } else {
      EXPECT_EQ(cudnn.rfind("not supported: cuDNN graph (", 0), 0u) << cudnn;
    }
  }
  EXPECT_EQ(j["sum_sites"]["aten"], 2);
  EXPECT_EQ(j["sum_sites"]["ours"], 2);
}

}  // namespace
}  // namespace u3d
