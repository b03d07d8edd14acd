// The GPU busy share of an epoch (metrics.csv gpu_busy, the status line's "gpu 97%", the epoch
// line): the GPU time of the training steps over the epoch's wall time.
//
// A pair of CUDA events is recorded on the current stream around each optimizer step: just before
// its work is enqueued (after its first batch is ready, so a wait for data is never counted) and
// just after (a replayed CUDA graph is one step). Nothing is waited for per step: the epoch's sum
// of (end - begin) is read once, at the epoch's end, after the loop's totals read has synchronised
// the device; the status line sums the pairs whose end has completed (queried, never waited for).
// The events of one epoch are a pool reused by the next (two events per step of the longest epoch).
// Accumulated micro-batches: a wait for the second and later micro-batches falls inside the pair.
//
// On the CPU the clock is inactive and every figure is NaN (the column stays empty, never 0).
#pragma once
#include <torch/torch.h>

#include <memory>

namespace u3d {

class GpuBusyClock {
 public:
  explicit GpuBusyClock(const torch::Device& device);
  ~GpuBusyClock();
  GpuBusyClock(const GpuBusyClock&) = delete;
  GpuBusyClock& operator=(const GpuBusyClock&) = delete;

  void start_epoch();  // the epoch's sums start at 0
  void begin_step();   // before a step's work is enqueued
  void end_step();     // after it
  // Seconds the GPU spent in this epoch's steps: of every step (waits for the last one: call after
  // a synchronising read), NaN on the CPU.
  double epoch_seconds();
  // The share of GPU time among the steps that have completed, over the GPU-clock span from the
  // epoch's first step to the last completed one (0..1); never waits; NaN on the CPU or before a
  // step has completed.
  double share_so_far();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // null on the CPU
};

}  // namespace u3d
