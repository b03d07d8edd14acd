// Whole-step CUDA-graph capture and replay (training.cuda_graph), as PyTorch's "whole network
// capture" recipe (torch.cuda.graph): the first `warmup` steps run eagerly on one persistent side
// stream (cuDNN autotuning and the optimizer's workspaces are allocated outside the graph), then the
// device is synchronised, the caching allocator's unused blocks are released (emptyCache) and the
// next step is captured once on the same side stream into a private memory pool; every later step
// replays the graph on the current stream. The step sets the gradients to none before its backward,
// so the captured backward allocates them from the graph's pool and each replay rewrites them in
// place (the recipe's zero_grad(set_to_none=True); no zeroing kernel in the graph); data-parallel
// gradients stay the all-reduce buckets' views, zeroed inside the graph. The learning rate and the GPU
// sampler's cursor are device tensors the caller writes before the step (outside the graph). Outputs
// (loss, found_inf) are static tensors, overwritten by each replay.
//
// Two ways to feed a captured step:
//  - run(micro): each batch (made outside the graph) is copied into static input tensors first,
//    one set per micro-batch (training.accumulate_steps).
//  - run_sampled(): the batch source (DeviceSampler::next_batch over a gpu cache: case choice,
//    crop, mirroring, rotation, normalisation, intensity augmentation) is captured in the same
//    graph, so one replay is one whole step with no host work.
//
// Capture runs in thread-local mode (cudaStreamCaptureModeThreadLocal): the sampler threads keep
// synchronising with their staging copies while the loop thread captures.
//
// Capturability is decided before capturing (CPU, fault injection and batch-shape changes are known
// conditions: TrainStep and run() fall back or refuse before any capture). A capture that fails
// anyway is a TrainingError naming the failing operation and telling the user to set
// training.cuda_graph: off; it is never silently turned into eager steps, because a failed capture
// leaves CUDA state behind that PyTorch does not promise to clean (the allocator's capture pool and
// the stream's capture). Before the error, the capture is ended and the graph's pool released, so
// the error reaches the user and the process exits cleanly.
#pragma once
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "u3d/data/batch.h"
#include "u3d/train/step_io.h"

namespace u3d {

class CaptureGraph;

class CudaGraphStep {
 public:
  // `step(micro, capturing)` is the eager step (TrainStep::compute).
  using StepFn = std::function<StepOutputs(const MicroBatches& micro, bool capturing)>;
  // Makes the next batch on the device with device work only (no host read, no host-to-device
  // copy): captured with the step by run_sampled().
  using SourceFn = std::function<Batch()>;
  // `micro_steps`: micro-batches per step (training.accumulate_steps).
  CudaGraphStep(StepFn step, int64_t warmup_steps, int64_t micro_steps, bool required);
  ~CudaGraphStep();

  // One step on the micro-batches `micro` gives (each copied into its static inputs as it comes):
  // warm-up, capture-then-replay, or replay. std::nullopt: a batch cannot be replayed (not on CUDA,
  // or its shapes differ from the captured ones; logged once, and a TrainingError instead with
  // training.cuda_graph: on); run this step and every later one eagerly.
  std::optional<StepOutputs> run(const MicroBatches& micro);
  // One step whose micro-batches `source` makes (called micro_steps times): warm-up (source and
  // step eagerly on the side stream), capture of source + step, or replay. Use either run() or
  // run_sampled() for one CudaGraphStep.
  StepOutputs run_sampled(const SourceFn& source);

  bool captured() const { return captured_; }
  bool failed() const { return !fallback_reason_.empty(); }
  const std::string& fallback_reason() const { return fallback_reason_; }
  // Warm-up steps run so far (the capture follows the last one).
  int64_t warmup_done() const { return warm_done_; }

 private:
  std::optional<StepOutputs> give_up(const std::string& reason);
  bool matches(const Batch& batch, const Batch& fixed) const;
  // Warm-up, capture or replay of `body` (the step, reading its inputs from static tensors or the
  // source).
  StepOutputs step_or_replay(const std::function<StepOutputs(bool capturing)>& body);
  c10::cuda::CUDAStream side_stream();

  StepFn step_;
  int64_t warmup_steps_;
  int64_t micro_steps_;
  bool required_;
  int64_t warm_done_ = 0;
  bool captured_ = false;
  std::string fallback_reason_;
  std::vector<Batch> static_;                  // static inputs per micro-batch (run): each batch is copied into these
  StepOutputs outputs_;                        // static outputs of the captured step
  std::optional<c10::cuda::CUDAStream> side_;  // warm-up and capture stream, one for the run
  std::unique_ptr<CaptureGraph> graph_;
};

// The first line of a capture failure's message, with the operation that broke it where PyTorch
// names it; for the one-line TrainingError.
std::string capture_failure_text(const std::exception& e);

}  // namespace u3d
