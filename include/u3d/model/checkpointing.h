// Activation checkpointing (model.activation_checkpointing): run a stage without keeping its
// activations, and run it again in the backward pass to get them back. LibTorch has no
// torch.utils.checkpoint, so this is a custom autograd function (torch::autograd::Function):
//
//   y = run_checkpointed(stage, [stage](const torch::Tensor& t) { return stage->forward(t); }, x,
//                        /*preserve_rng=*/dropout > 0);
//
// forward   runs `fn(x)` with autograd off: only x (the stage's input) is kept, not the stage's
//           intermediate activations. The stage's parameters are inputs of the function, so their
//           gradients reach them through the autograd graph even when x needs none (the image).
// backward  runs `fn(x)` again with autograd on, under the autocast state the forward saw (device
//           types, dtypes; cast cache off), with the CPU and CUDA random-number states of the
//           forward when `preserve_rng` (dropout draws the same masks), and with the stage's buffers
//           (batch-norm running statistics) put back afterwards, so the recomputation leaves no trace;
//           then torch::autograd::grad of that output gives the gradients of x and of the parameters.
//
// Gradients equal those of the plain stage: the same kernels on the same inputs (bitwise in
// deterministic fp32 on the CPU; tests/unit/model/unet_test.cpp). The cost: one more forward of each
// checkpointed stage per step (about 1/3 more compute for a whole network); the memory saved: every
// activation inside the stage. Use only in training with autograd on; `fn` must not change x.
// Inside a CUDA graph capture it records like any backward; `preserve_rng` then cannot read the
// generator's state (TrainStep keeps such steps eager).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>

namespace u3d {

using StageFn = std::function<torch::Tensor(const torch::Tensor&)>;

// (N, C, D, H, W) -> what `fn` returns, without keeping the activations inside `stage`. `stage` is
// the module whose parameters and buffers `fn` uses.
torch::Tensor run_checkpointed(const std::shared_ptr<torch::nn::Module>& stage, StageFn fn, const torch::Tensor& x,
                               bool preserve_rng);

}  // namespace u3d
