// Configs and batches for the training-step tests (unit/train/, gpu/train_step_cuda_test.cpp, gpu/gpu_fixes_test.cpp,
// gpu/slices_gpu_test.cpp).
#pragma once
#include <torch/torch.h>

#include "u3d/core/config.h"
#include "u3d/data/batch.h"

namespace u3d::test {

// A 2-level, 4-filter U-Net trained on the CPU with lr 1e-2 (data.path is never opened).
inline Config step_config(Precision precision, Toggle channels_last) {
  Config cfg;
  cfg.data.path = "unused.h5";
  cfg.model.levels = 2;
  cfg.model.base_filters = 4;
  cfg.model.channels_last = channels_last;
  cfg.training.device = Device::kCpu;
  cfg.training.precision = precision;
  cfg.training.lr = 1e-2;
  return cfg;
}

// A U-Net of `levels` levels and `base_filters` filters with batch norm, channels-last, trained on
// CUDA in `precision`; every other key at its default.
inline Config cuda_batch_norm_config(int64_t levels, int64_t base_filters, Precision precision) {
  Config cfg;
  cfg.model.levels = levels;
  cfg.model.base_filters = base_filters;
  cfg.model.norm = Norm::kBatch;
  cfg.model.channels_last = Toggle::kOn;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = precision;
  return cfg;
}

// A regression batch of 2 samples, `channels` channels, size^3 voxels, drawn from torch's CPU
// generator seeded with `seed`: image N(0, 1), target U[0, 1), mask 1 on about 70% of the voxels
// (float32). On a GPU: random_batch(...).to(device), the same values.
inline Batch random_batch(uint64_t seed, int64_t channels = 2, int64_t size = 16) {
  torch::manual_seed(seed);
  Batch b;
  b.image = torch::randn({2, channels, size, size, size});
  b.target = torch::rand({2, 1, size, size, size});
  b.mask = (torch::rand({2, 1, size, size, size}) > 0.3).to(torch::kFloat);
  return b;
}

}  // namespace u3d::test
