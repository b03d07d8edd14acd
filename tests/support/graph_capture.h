// CUDA-graph capture for the GPU tests of captured ops (gpu/fused_loss_test.cpp): the warm-up, the
// zeroed gradients and the capture in one place, and the replay against an eager run.
#pragma once
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace u3d::test {

// On a side stream: `step` run twice eagerly (allocator pools, lazy initialisation; the leaves'
// gradients cleared before each), the leaves' gradients set to zeros so the captured backward
// accumulates into them in place, then `step` captured into `graph`. Returns the captured run's
// result: a static tensor each replay rewrites.
inline torch::Tensor capture_after_warm_up(at::cuda::CUDAGraph& graph, const std::function<torch::Tensor()>& step,
                                           const std::vector<torch::Tensor*>& leaves) {
  const auto side = c10::cuda::getStreamFromPool();
  torch::cuda::synchronize();
  torch::Tensor result;
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < 2; ++i) {
      for (torch::Tensor* t : leaves) t->mutable_grad() = torch::Tensor();
      (void)step();
    }
    for (torch::Tensor* t : leaves) t->mutable_grad() = torch::zeros_like(*t);
    graph.capture_begin();
    result = step();
    graph.capture_end();
  }
  torch::cuda::synchronize();
  return result;
}

// A captured step's outputs and its eager rerun's, on the same new input values.
struct ReplayAndEager {
  torch::Tensor replayed, replayed_grad, eager, eager_grad;
};

// `graph` replayed (with `leaf`'s gradient zeroed first) and its result and the leaf's gradient
// copied, then `step` run eagerly on the same inputs with the leaf's gradient cleared.
inline ReplayAndEager replay_then_eager(at::cuda::CUDAGraph& graph, const torch::Tensor& result,
                                        const std::function<torch::Tensor()>& step, torch::Tensor& leaf) {
  ReplayAndEager r;
  {
    torch::NoGradGuard no_grad;
    leaf.grad().zero_();
  }
  graph.replay();
  torch::cuda::synchronize();
  r.replayed = result.clone();
  r.replayed_grad = leaf.grad().clone();
  leaf.mutable_grad() = torch::Tensor();
  r.eager = step();
  r.eager_grad = leaf.grad();
  leaf.mutable_grad() = torch::Tensor();
  return r;
}

}  // namespace u3d::test
