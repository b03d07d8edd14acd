// The real training step run for `trainer plan --device cuda` to measure its memory: plan/ declares
// what it needs (TrainingSteps, plan/memory_model.h) and the plan command hands this in, so planning
// includes nothing of training.
//
//   make_plan_measured(fingerprint, options, run_training_steps);
#pragma once
#include <cstdint>

#include "u3d/core/config.h"

namespace u3d {

// Three steps of the real training step (TrainStep) on CUDA device 0 for a random batch (N, in_ch,
// D, H, W) of `patch`: bf16 autocast, eager, the layout of resolve_channels_last(cfg, cuda), the
// task's loss (dice_ce when out_ch > 1, else masked_l1) and optimizer (sgd with momentum for
// optimizer_states 1, else adamw); the network built with seed 0. Synchronizes the device before
// it returns. What the GPU reports (out of memory included) propagates; ConfigError for deep
// supervision with out_ch 1 (training refuses it for a regression task too).
void run_training_steps(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch, int64_t batch,
                        int64_t optimizer_states);

}  // namespace u3d
