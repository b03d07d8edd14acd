// Whole-step CUDA-graph capture and replay (training.cuda_graph), as PyTorch's "whole network
// capture" recipe: the first `warmup` steps run eagerly on a side stream (cuDNN autotuning, the
// gradient tensors and the optimizer's workspaces are allocated outside the graph), the next step
// is captured once on the side stream into a private memory pool, and every step then copies its
// batch into the static input tensors and replays the graph on the current stream. The learning
// rate is a device tensor the caller writes before the step (outside the graph). Outputs (loss,
// found_inf) are static tensors, overwritten by each replay.
//
// Falls back (auto) or throws (required, training.cuda_graph: on) when a batch's shapes, dtypes or
// fields differ from the captured ones, or when the capture fails (an op that syncs with the host
// or cannot be captured); after a fallback run() returns std::nullopt and the caller steps eagerly.
#pragma once
#include <ATen/cuda/CUDAGraph.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "u3d/augment.h"
#include "u3d/train_step.h"

namespace u3d {

class CudaGraphStep {
 public:
  // `step(batch, capturing)` is the eager step (TrainStep::compute).
  using StepFn = std::function<StepOutputs(const Batch& batch, bool capturing)>;
  CudaGraphStep(StepFn step, int64_t warmup_steps, bool required);
  ~CudaGraphStep();

  // One step: warm-up, capture-then-replay, or replay. std::nullopt: the graph path gave up (the
  // reason is logged once and in fallback_reason()); run this batch eagerly.
  std::optional<StepOutputs> run(const Batch& batch);

  bool captured() const { return captured_; }
  bool failed() const { return !fallback_reason_.empty(); }
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  std::optional<StepOutputs> give_up(const std::string& reason);
  bool matches(const Batch& batch) const;
  std::string shape_of(const Batch& batch) const;

  StepFn step_;
  int64_t warmup_steps_;
  bool required_;
  int64_t warm_done_ = 0;
  bool captured_ = false;
  std::string fallback_reason_;
  Batch static_;       // static inputs: each batch is copied into these
  StepOutputs outputs_;  // static outputs of the captured step
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}  // namespace u3d
