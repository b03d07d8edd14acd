// Where the loader's batches come from: one interface over the two ways of sampling, chosen by
// where the cache lives (BatchLoader picks one and owns it, with the BatchFinalizer it hands in):
//
//  - host sampling (PatchSampler, sampler.h): sampler threads fill raw batches ahead of the loop;
//    CPU training finalizes them in the threads, CUDA training copies them through a page-locked
//    staging ring on a side stream and finalizes them on the GPU (src/data/host_source.cpp).
//  - GPU sampling (DeviceSampler, device_sampler.h) over a data.cache: gpu cache: no threads; next()
//    only enqueues device work, and capturable() hands out the same sampling as device work only,
//    for a CUDA graph to capture with the training step (src/data/device_source.cpp).
//
// Either way batch (epoch, step) is a pure function of (seed, epoch, step).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>

#include "u3d/data/batch.h"

namespace u3d {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batch `step` of `epoch`, finalized, on the training device (CUDA: ready in the order of the
  // current stream).
  virtual Batch next(int64_t epoch, int64_t step) = 0;
  // The host raw batch (crops in compact dtypes, not finalized), valid until the next call; host
  // sampling with LoaderOptions::finalize = false only.
  virtual const RawBatch& next_raw(int64_t epoch, int64_t step);
  // The next batch asked for (by next() or by the capturable source) is (epoch, step).
  virtual void seek(int64_t epoch, int64_t step) = 0;
  // Makes the batch at the position seek() set, then moves the position on by one, with device work
  // only (no host read, no host-to-device copy), so a CUDA graph can capture it; empty (and `why`)
  // when this source cannot.
  virtual std::function<Batch()> capturable(std::string* why);
  // Stops production (joins threads); next() starts again where asked. Idempotent.
  virtual void stop() {}
  // Seconds next() has blocked waiting for a batch (GPU sampling: its host time).
  virtual double wait_seconds() const = 0;
  // How batches are made, for the log.
  virtual std::string describe() const = 0;
};

}  // namespace u3d
