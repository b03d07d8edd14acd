// The training loop's source of batches: ready on the training device, produced ahead of time, with
// the time the loop waited for them.
//
//   BatchLoader loader(sampler, {device, workers, prefetch, steps_per_epoch, epochs});
//   Batch b = loader.next(epoch, step);   // blocks only while batch (epoch, step) is not ready yet
//
// The loader owns the two stages after sampling: one BatchSource (batch_source.h), chosen by where
// the cache lives and where training runs, and the BatchFinalizer (finalize.h) that finishes every
// batch it hands out:
//  - GPU cache: DeviceSampler on the GPU, no threads; next() only enqueues device work, and
//    capturable() gives the same sampling for a CUDA graph to capture with the step.
//  - host cache, CPU training: data.workers threads each build whole batches (crop, spatial
//    augmentation, then the finalizer: normalisation, intensity augmentation) into a bounded queue:
//    at most data.prefetch batches are ready or in the making (so keep it >= workers).
//  - host cache, CUDA training: the threads fill a ring of page-locked staging batches in compact
//    dtypes; the loop copies each to a device ring on a separate CUDA stream (events order the copy
//    after the slot's previous use and the compute after the copy) and issues the copy of the next
//    batch before returning, so copies overlap the current step's compute; the finalizer then runs
//    batched on the GPU.
// Batches are a pure function of (seed, epoch, step) whatever the number of threads. The first
// call, or a call out of sequence (a resume, a test), starts production at that position; later
// batches follow (epoch, step + 1), then (epoch + 1, 0) after steps_per_epoch, up to `epochs`.
// A worker's failure stops the others and is rethrown by next() as a DataError naming the case and
// the reason; the destructor (or stop()) joins every thread, also while workers are blocked.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "u3d/data/batch_source.h"
#include "u3d/data/finalize.h"
#include "u3d/data/sampler.h"

namespace u3d {

struct LoaderOptions {
  torch::Device device = torch::kCPU;  // training device
  int64_t workers = 1;                 // sampler threads (host cache)
  int64_t prefetch = 0;                // batches made ahead of the loop (ready or in the making); 0: 2 x workers
  int64_t steps_per_epoch = 1;
  int64_t epochs = -1;  // last epoch to produce (inclusive); -1: no end
  // false: next_raw() hands out host raw batches (crops in compact dtypes, no normalisation or
  // intensity augmentation), the host share of the work (the data benchmark's "host" stage).
  bool finalize = true;
};

class BatchLoader {
 public:
  BatchLoader(const PatchSampler& sampler, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Batch `step` of `epoch` on the training device (CUDA: ready in the order of the current stream).
  Batch next(int64_t epoch, int64_t step);
  // With finalize = false: the host raw batch, valid until the next call.
  const RawBatch& next_raw(int64_t epoch, int64_t step);
  // Stops production and joins the threads; next() starts again where asked. Idempotent.
  void stop();

  // The capturable source: with a GPU cache (and no noise augmentation) a function that makes the
  // batch at the position seek() set and moves on by one, with device work only, so the training
  // step's CUDA graph captures sampling with the step (TrainStep::set_batch_source). Empty with
  // `why` empty for host sampling, empty with the reason when GPU sampling cannot be captured.
  std::function<Batch()> capturable(std::string* why);
  // The next batch asked for (next(), or one call of the capturable source) is (epoch, step).
  void seek(int64_t epoch, int64_t step);

  // Total seconds next() has blocked waiting for a batch (GPU sampling: its host time).
  double wait_seconds() const;
  int64_t batches() const;  // batches handed out
  // How batches are made, for the log: "4 sampler threads, pinned staging ring, copies on a side stream".
  std::string describe() const;

 private:
  std::unique_ptr<BatchFinalizer> finish_;  // before source_: the source refers to it
  std::unique_ptr<BatchSource> source_;
  int64_t handed_ = 0;
};

}  // namespace u3d
