#include "u3d/cuda_graph.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "u3d/errors.h"

namespace u3d {
namespace {

torch::Tensor clone_like(const torch::Tensor& t) { return t.defined() ? t.clone() : torch::Tensor(); }

bool same_layout(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

std::string describe_tensor(const torch::Tensor& t) {
  if (!t.defined()) return "none";
  return fmt::format("{} {}", fmt::join(t.sizes(), "x"), c10::toString(t.scalar_type()));
}

// Makes `waiter` wait for the work queued so far on `signaller` (no host sync).
void wait_stream(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& signaller) {
  at::cuda::CUDAEvent event;
  event.record(signaller);
  event.block(waiter);
}

}  // namespace

CudaGraphStep::CudaGraphStep(StepFn step, int64_t warmup_steps, bool required)
    : step_(std::move(step)), warmup_steps_(std::max<int64_t>(1, warmup_steps)), required_(required) {}

CudaGraphStep::~CudaGraphStep() = default;

std::string CudaGraphStep::shape_of(const Batch& b) const {
  return fmt::format("image {}, target {}, mask {}", describe_tensor(b.image), describe_tensor(b.target),
                     describe_tensor(b.mask));
}

bool CudaGraphStep::matches(const Batch& b) const {
  return same_layout(b.image, static_.image) && same_layout(b.target, static_.target) &&
         same_layout(b.mask, static_.mask);
}

std::optional<StepOutputs> CudaGraphStep::give_up(const std::string& reason) {
  if (required_) throw TrainingError(fmt::format("training.cuda_graph: on, but {}; set training.cuda_graph: auto "
                                                 "to fall back to eager steps",
                                                 reason));
  fallback_reason_ = reason;
  spdlog::warn("training step: CUDA graph off from here on: {}; eager steps", reason);
  graph_.reset();
  return std::nullopt;
}

std::optional<StepOutputs> CudaGraphStep::run(const Batch& batch) {
  if (failed()) return std::nullopt;
  if (!batch.image.is_cuda()) return give_up("the batch is not on a CUDA device");
  if (!static_.image.defined()) {
    static_.image = clone_like(batch.image);
    static_.target = clone_like(batch.target);
    static_.mask = clone_like(batch.mask);
  } else if (!matches(batch)) {
    return give_up(fmt::format("the batch shape changed from ({}) to ({}); a graph replays fixed shapes",
                               shape_of(static_), shape_of(batch)));
  } else {
    static_.image.copy_(batch.image, /*non_blocking=*/true);
    static_.target.copy_(batch.target, /*non_blocking=*/true);
    if (static_.mask.defined()) static_.mask.copy_(batch.mask, /*non_blocking=*/true);
  }
  if (captured_) {
    graph_->replay();
    return outputs_;
  }
  const auto current = c10::cuda::getCurrentCUDAStream();
  auto side = c10::cuda::getStreamFromPool();
  wait_stream(side, current);
  if (warm_done_ < warmup_steps_) {  // eager on the side stream, as the capture will run
    StepOutputs out;
    {
      c10::cuda::CUDAStreamGuard guard(side);
      out = step_(static_, /*capturing=*/false);
    }
    wait_stream(current, side);
    ++warm_done_;
    return out;
  }
  // Capture: nothing runs on the device during capture, so this batch is trained by the replay.
  torch::cuda::synchronize();
  graph_ = std::make_unique<at::cuda::CUDAGraph>();
  try {
    c10::cuda::CUDAStreamGuard guard(side);
    graph_->capture_begin();
    try {
      outputs_ = step_(static_, /*capturing=*/true);
    } catch (...) {
      try {
        graph_->capture_end();
      } catch (...) {
      }
      throw;
    }
    graph_->capture_end();
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    (void)cudaGetLastError();  // clear the sticky capture error so eager steps can go on
    return give_up(fmt::format("the step could not be captured ({})", what));
  }
  wait_stream(current, side);
  captured_ = true;
  spdlog::info("training step: captured in a CUDA graph after {} warm-up steps; replaying it from here on",
               warm_done_);
  graph_->replay();
  return outputs_;
}

}  // namespace u3d
