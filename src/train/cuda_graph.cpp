#include "u3d/train/cuda_graph.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include "u3d/core/errors.h"

namespace u3d {

// at::cuda::CUDAGraph with a way out of a capture that failed: CUDAGraph::capture_end throws on an
// invalidated capture before the allocator leaves capture mode, and reset() releases the private
// pool only after a successful capture. abandon() ends the stream's capture, takes the allocators
// out of capture mode and releases the pool, so the process can report the error and exit cleanly.
// It also hands the random generators back to eager use: capture_begin marks every generator
// registered with the graph (the default CUDA generator always) as capturing, and only capture_end's
// epilogue clears that; left set, the next eager dropout or rand would draw from the graph's
// offsets. (CUDAGeneratorState::capture_epilogue is not exported; it clears the same public flag.)
class CaptureGraph : public at::cuda::CUDAGraph {
 public:
  void abandon() noexcept {
    try {
      for (auto& entry : captured_generator_states_) entry.first->capturing_ = false;
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(capture_stream_.stream(), &status) == cudaSuccess &&
          status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(capture_stream_.stream(), &partial);
        if (partial) (void)cudaGraphDestroy(partial);
      }
      (void)cudaGetLastError();  // the capture's sticky error
      if (capture_dev_ != UNDEFINED_DEVICE && !capture_ended_) {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
        c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_);
        try {
          at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(mempool_id_);
          at::getHostAllocator(at::kCUDA)->release_pool(mempool_id_);
        } catch (...) {
        }
      }
      reset();
    } catch (...) {
    }
  }
};

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

std::string shape_of(const Batch& b) {
  return fmt::format("image {}, target {}, mask {}, skeleton {}, distance {}", describe_tensor(b.image),
                     describe_tensor(b.target), describe_tensor(b.mask), describe_tensor(b.maps.skeleton),
                     describe_tensor(b.maps.distance));
}

// Makes `waiter` wait for the work queued so far on `signaller` (no host sync).
void wait_stream(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& signaller) {
  at::cuda::CUDAEvent event;
  event.record(signaller);
  event.block(waiter);
}

}  // namespace

std::string capture_failure_text(const std::exception& e) {
  const std::string what = error_line(e);
  return what.size() > 300 ? what.substr(0, 300) + "..." : what;
}

CudaGraphStep::CudaGraphStep(StepFn step, int64_t warmup_steps, int64_t micro_steps, bool required)
    : step_(std::move(step)),
      warmup_steps_(std::max<int64_t>(1, warmup_steps)),
      micro_steps_(std::max<int64_t>(1, micro_steps)),
      required_(required) {}

CudaGraphStep::~CudaGraphStep() = default;

bool CudaGraphStep::matches(const Batch& b, const Batch& fixed) const {
  return same_layout(b.image, fixed.image) && same_layout(b.target, fixed.target) && same_layout(b.mask, fixed.mask) &&
         same_layout(b.maps.skeleton, fixed.maps.skeleton) && same_layout(b.maps.distance, fixed.maps.distance);
}

std::optional<StepOutputs> CudaGraphStep::give_up(const std::string& reason) {
  if (required_)
    throw TrainingError(
        fmt::format("training.cuda_graph: on, but {}; set training.cuda_graph: auto "
                    "to fall back to eager steps",
                    reason));
  fallback_reason_ = reason;
  spdlog::warn("training step: CUDA graph off from here on: {}; eager steps", reason);
  graph_.reset();
  return std::nullopt;
}

c10::cuda::CUDAStream CudaGraphStep::side_stream() {
  if (!side_) side_ = c10::cuda::getStreamFromPool();
  return *side_;
}

std::optional<StepOutputs> CudaGraphStep::run(const MicroBatches& micro) {
  if (failed()) return std::nullopt;
  const bool first = static_.empty();
  for (int64_t m = 0; m < micro_steps_; ++m) {
    const Batch batch = micro(m);
    if (!batch.image.is_cuda()) return give_up("the batch is not on a CUDA device");
    if (first) {
      Batch fixed;
      fixed.image = clone_like(batch.image);
      fixed.target = clone_like(batch.target);
      fixed.mask = clone_like(batch.mask);
      fixed.maps.skeleton = clone_like(batch.maps.skeleton);
      fixed.maps.distance = clone_like(batch.maps.distance);
      static_.push_back(std::move(fixed));
      continue;
    }
    Batch& fixed = static_[static_cast<size_t>(m)];
    if (!matches(batch, fixed)) {
      return give_up(fmt::format("the batch shape changed from ({}) to ({}); a graph replays fixed shapes",
                                 shape_of(fixed), shape_of(batch)));
    }
    fixed.image.copy_(batch.image, /*non_blocking=*/true);
    fixed.target.copy_(batch.target, /*non_blocking=*/true);
    for (auto [dst, src] : {std::pair{&fixed.mask, &batch.mask}, std::pair{&fixed.maps.skeleton, &batch.maps.skeleton},
                            std::pair{&fixed.maps.distance, &batch.maps.distance}}) {
      if (dst->defined()) dst->copy_(*src, /*non_blocking=*/true);
    }
  }
  return step_or_replay([this](bool capturing) {
    return step_([this](int64_t m) { return static_[static_cast<size_t>(m)]; }, capturing);
  });
}

StepOutputs CudaGraphStep::run_sampled(const SourceFn& source) {
  return step_or_replay(
      [this, &source](bool capturing) { return step_([&source](int64_t) { return source(); }, capturing); });
}

StepOutputs CudaGraphStep::step_or_replay(const std::function<StepOutputs(bool capturing)>& body) {
  if (captured_) {
    graph_->replay();
    return outputs_;
  }
  const auto current = c10::cuda::getCurrentCUDAStream();
  const auto side = side_stream();
  wait_stream(side, current);
  if (warm_done_ < warmup_steps_) {  // eager on the side stream, as the capture will run
    StepOutputs out;
    {
      c10::cuda::CUDAStreamGuard guard(side);
      out = body(/*capturing=*/false);
    }
    wait_stream(current, side);
    ++warm_done_;
    return out;
  }
  // Capture, as torch.cuda.graph: an idle device and no cached blocks left over from the warm-up
  // steps, so the graph's private pool is all the step needs. Nothing runs on the device during the
  // capture, so this step's batch is trained by the first replay.
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  graph_ = std::make_unique<CaptureGraph>();
  {
    c10::cuda::CUDAStreamGuard guard(side);
    try {
      graph_->capture_begin(/*pool=*/{0, 0}, cudaStreamCaptureModeThreadLocal);
      outputs_ = body(/*capturing=*/true);
      graph_->capture_end();
    } catch (const std::exception& e) {
      const std::string what = capture_failure_text(e);
      graph_->abandon();
      graph_.reset();
      throw TrainingError(
          fmt::format("training.cuda_graph: the training step could not be captured in a CUDA graph "
                      "({}); set training.cuda_graph: off (resume with --resume --set "
                      "training.cuda_graph=off)",
                      what));
    }
  }
  wait_stream(current, side);
  captured_ = true;
  spdlog::info("training step: captured in a CUDA graph after {} warm-up steps; replaying it from here on", warm_done_);
  graph_->replay();
  return outputs_;
}

}  // namespace u3d
