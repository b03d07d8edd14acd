// cuDNN's own fused normalisation + activation, through its graph API (NVIDIA's header-only
// cudnn-frontend), so that `trainer bench-norm` (app/norm_benchmark.h) can time it beside the
// project's kernels (kernels/fused_norm_act.h) and ATen on the same tensors, and the faster one can be
// picked by measurement (issue 53). No network uses it.
//
//   x, y, dy, dx   (N, C, D, H, W) ChannelsLast3d (NDHWC memory; 2-D slices as D = 1), CUDA,
//                  float16 | bfloat16 | float32, all of the spec's dtype and shape
//   weight, bias   (C) float32: the norm's affine parameters; dweight, dbias (C) float32
//   mean, inv_variance  float32 statistics the forward saves for the backward: batch norm (C), over
//                  N x D x H x W; instance norm (N, C), over D x H x W; inv_variance = 1 / sqrt(var + eps)
//   running_mean, running_var (C) float32, batch norm only: read from `running_in`, the updated
//                  averages (momentum as cuDNN's exponential average factor) written to `running_out`
//   act            none | relu | leaky_relu(slope): RELU_FWD with a lower clip slope, and in the
//                  backward RELU_BWD on y (y > 0 exactly where the norm's output is > 0)
//
// Forward graph: batchnorm (training) or instancenorm (training) -> [activation]. Backward graph:
// [activation's gradient from dy and y] -> batchnorm_backward or instancenorm_backward. cuDNN picks
// each graph's engine by its heuristics (modes A, then fallback) when the object is built; a graph it
// has no engine for (say LeakyReLU fused with a norm) is refused then, with cuDNN's words.
//
// The build compiles this only with the CUDA kernels and cudnn-frontend's headers
// (cmake/U3dKernels.cmake); cuDNN itself is the libcudnn.so.9 that LibTorch loaded, looked up at run
// time, so the library links no cuDNN of its own. Without it built() is false and the constructor throws.
#pragma once
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>

#include "u3d/kernels/fused_norm_act.h"

namespace u3d::kernels {

// Whether this library was compiled with cuDNN's graphs (cudnn-frontend found at build time).
bool cudnn_graphs_built();

// The cuDNN library version at run time ("9.19.0"), or why there is none.
std::string cudnn_graphs_runtime();

enum class CudnnNorm { kBatch, kInstance };

struct CudnnNormActSpec {
  CudnnNorm norm = CudnnNorm::kBatch;
  std::array<int64_t, 5> shape{};              // (N, C, D, H, W)
  torch::ScalarType dtype = torch::kBFloat16;  // x, y, dy, dx
  FusedActivation act = FusedActivation::relu();
  double eps = 1e-5;
  double momentum = 0.1;  // batch norm's running averages
};

struct CudnnNormStats {
  torch::Tensor mean, inv_variance;  // float32, (C) or (N, C)
};

struct CudnnNormGrads {
  torch::Tensor dx, dweight, dbias;
};

// Both graphs of one spec, built on the current CUDA device; throws TrainingError("cuDNN graph ...:
// <cuDNN's message>") when cuDNN refuses either graph, and without cuDNN graphs in the build.
class CudnnNormAct {
 public:
  explicit CudnnNormAct(const CudnnNormActSpec& spec);
  ~CudnnNormAct();
  CudnnNormAct(const CudnnNormAct&) = delete;
  CudnnNormAct& operator=(const CudnnNormAct&) = delete;

  // y; `stats` receives the saved statistics (allocated when undefined). Batch norm reads and writes
  // the running averages as above (both pairs (C) float32; instance norm ignores them).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                        CudnnNormStats& stats, const std::array<torch::Tensor, 2>& running_in = {},
                        const std::array<torch::Tensor, 2>& running_out = {});

  // The gradients of x, weight and bias from dy, the forward's x and y, and its statistics.
  CudnnNormGrads backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& y,
                          const torch::Tensor& weight, const CudnnNormStats& stats);

  const CudnnNormActSpec& spec() const { return spec_; }

 private:
  struct Graphs;
  CudnnNormActSpec spec_;
  std::unique_ptr<Graphs> graphs_;
};

}  // namespace u3d::kernels
