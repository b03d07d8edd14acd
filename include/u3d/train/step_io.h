// What one training step takes and leaves, shared by the step (train_step.h) and its CUDA-graph
// capture (cuda_graph.h), so neither includes the other.
//
//   MicroBatches micro = [&](int64_t m) { return loader.next(epoch, step * N + m); };
//   StepOutputs out = step.compute(micro, /*capturing=*/false);   // out.loss, out.found_inf
#pragma once
#include <torch/torch.h>

#include <functional>

#include "u3d/data/batch.h"

namespace u3d {

// Micro-batch `m` (0 .. accumulate_steps - 1) of the current optimizer step, on the device.
using MicroBatches = std::function<Batch(int64_t m)>;

// The tensors a step leaves behind: loss () float32 and found_inf () float32 0/1, on the device.
struct StepOutputs {
  torch::Tensor loss, found_inf;
};

}  // namespace u3d
