// Gradient averaging across ranks, overlapped with the backward pass (DistributedDataParallel's
// scheme, on c10d collectives): parameters are grouped into buckets of about 25 MB in reverse order (the order backward
// produces their gradients; a first bucket of 1 MB so communication starts early), each bucket a flat float32 buffer on
// the device. Each parameter's gradient is a view into its bucket (DDP's gradient_as_bucket_view), with the
// parameter's own sizes and strides (channels_last_3d weights included): backward accumulates into the buffer in
// place, and the all-reduce works on it directly, with no copy in or out. A post-hook on every parameter's gradient
// accumulator counts the bucket's gradients; when a bucket is complete, and every bucket before it has been launched
// (all ranks launch collectives in the same order), an asynchronous all-reduce of it starts while backward goes on.
// finish() launches what is left (a parameter that got no gradient adds its zeros), and waits.
//
// Gradients stay defined and are zeroed in place (Optimizer::zero_grad); a gradient replaced from
// outside (Optimizer::match_parameter_layout after a resume changes a parameter's strides, a test
// setting p.grad()) is put back into its bucket with its values by the next arm().
//
//   GradientSync sync(optimizer.params(), dist);     // after the weights are on the device
//   sync.arm(last_micro_batch);                      // before each backward: reduce in this one?
//   loss.backward();                                 // buckets start as they complete
//   sync.finish();                                   // averaged gradients in p.grad(), every rank
//
// With gradient accumulation only the last micro-batch's backward reduces (the gradients have
// summed in place by then); unscaling, the Inf/NaN check, clipping and the update come after
// finish(), so every rank decides the same.
//
// CUDA graphs (training.cuda_graph: on, NCCL): the hooks run during the warm-up steps and the
// capture; the capture records the backward's accumulation into the buffers and the NCCL
// all-reduces (ProcessGroupNCCL forks its stream from the capturing one and joins it again in wait()), in the
// order this rank launched them, so each replay repeats them with no host work. Every rank captures
// the same step after the same warm-up steps, so the replays' collectives match. set_enabled() and
// arm() no longer change what a replay does.
//
// Timing (the step benchmark under torchrun): reduce_seconds() all-reduces the buckets once more,
// alone, for the full cost of communication; steps with and without sync give the exposed part.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "u3d/train/distributed.h"

namespace u3d {

// Bucket assignment: parameter indices per bucket, in the order they are launched (reverse
// parameter order), each bucket at most `cap_bytes` (the first `first_cap_bytes`) of float32 or
// holding one larger tensor alone.
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>& params, int64_t cap_bytes,
                                                  int64_t first_cap_bytes);

class GradientSync {
 public:
  static constexpr int64_t kBucketBytes = 25 * 1024 * 1024;
  static constexpr int64_t kFirstBucketBytes = 1024 * 1024;

  GradientSync(std::vector<torch::Tensor> params, Distributed& dist, int64_t bucket_bytes = kBucketBytes,
               int64_t first_bucket_bytes = kFirstBucketBytes);
  ~GradientSync();

  // Whether the coming backward pass reduces (the last micro-batch of the step). Resets the counts.
  // Registers the hooks on the first call (after a resume has put the weights in place).
  void arm(bool reduce);
  // false: arm() never reduces (the step benchmark's local-only steps).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  // Launches the buckets not launched yet and waits for all: p.grad() holds sum / world_size.
  // DistributedError when a collective fails (describe_failure names the ranks gone).
  void finish();

  // The flat buffers, one per bucket: (numel,) float32 on the parameters' device; each parameter's
  // gradient is a view into its bucket's.
  std::vector<torch::Tensor> bucket_buffers() const;

  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  int64_t buffer_bytes() const;
  // All-reduces a copy of every bucket buffer once, synchronously, and returns the seconds it took
  // (the communication alone; the gradients are not touched).
  double reduce_seconds();

 private:
  struct Bucket;
  void on_gradient(size_t param);  // autograd post-hook: may run on the engine's device thread
  void launch_ready();             // launches complete buckets in order (mutex held)
  void launch(Bucket& b);
  torch::Tensor bucket_view(size_t param) const;  // the parameter's gradient in its bucket
  void bind_gradients();                          // makes each p.grad() its bucket view

  std::vector<torch::Tensor> params_;
  Distributed& dist_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<std::unique_ptr<Bucket>> state_;
  std::vector<size_t> bucket_of_;                    // per parameter
  std::vector<size_t> bucket_slot_;                  // per parameter: its index in its bucket
  std::vector<std::shared_ptr<void>> accumulators_;  // the gradient accumulators (kept alive: they hold the hooks)
  std::mutex mutex_;
  bool armed_ = false, enabled_ = true, hooked_ = false;
  size_t next_launch_ = 0;
};

}  // namespace u3d
