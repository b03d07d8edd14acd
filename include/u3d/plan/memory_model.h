// Peak memory of one training step of the project's U-Net (model/unet.h), estimated from the
// shapes alone, and measured by running the step (CPU: resident set; CUDA: caching allocator).
//
//   int64_t bytes = estimate_step_bytes(cfg.model, /*in_ch=*/1, /*out_ch=*/3, {128, 128, 128},
//                                       /*batch=*/2, /*activation_bytes=*/2);   // bf16 activations
//
// What the estimate counts (element counts times the activation's bytes; the input is float32):
//   - the input batch (N, in, D, H, W);
//   - per ConvBlock the tensors autograd keeps for the backward pass: the convolution's output
//     (saved by the norm), the dropout's output, the norm's output (saved by leaky_relu, gelu and
//     elu, freed with relu) and the activation's output (saved by the next convolution);
//   - per decoder stage the concatenation (N, 2 f_l, ...) (the transposed convolution's output only
//     lives until the concatenation is made); residual blocks (resenc_unet) their pooled and
//     projected skip, sum and activation;
//   - the head's output (N, out, D, H, W), the deep-supervision heads' outputs and the output
//     activation; `loss_tensors` float32 tensors of the head's size for the loss (dice_ce: about 6);
//   - transient: the gradients alive at the start of the backward pass, two full-resolution
//     (N, f_0, D, H, W) tensors;
//   - activation checkpointing (model.activation_checkpointing): a checkpointed block keeps its
//     input only; the recomputation of the largest block is transient;
//   - weights: float32 parameters, their gradients and `optimizer_states` float32 tensors per
//     parameter (sgd with momentum: 1, adam/adamw: 2), never scaled.
// The network part is scaled by kActivationFactor = 1.206 and kOverheadBytes = 24.3 MB is added
// (memory_model.cpp), a least-squares fit of the relative error to measure_step_bytes_cpu (fp32,
// optimizer_states 0, loss_tensors 0; steady state after one warm-up step) on a 2-core x86 machine,
// LibTorch 2.11, plain unet, instance norm, leaky_relu, deep supervision, 1 input and 3 output
// channels (2026-11-23):
//
//   levels base  patch        batch  estimate   measured   error
//        3   16  32x32x32         2    128.9 MB   118.2 MB   +9.1%
//        3   16  64x64x64         2    842.4 MB   751.6 MB  +12.1%
//        4   16  64x64x64         2    875.0 MB   774.8 MB  +12.9%
//        4   16  32x64x64         2    455.3 MB   490.8 MB   -7.3%
//        3   24  48x48x48         2    544.0 MB   583.3 MB   -6.7%
//        4    8  64x64x64         2    452.4 MB   461.1 MB   -1.9%
//        3   32  32x32x32         2    237.6 MB   259.2 MB   -8.3%
//        4   16  64x64x64         1    455.3 MB   544.2 MB  -16.3%
//        4   32  32x32x32         2    277.6 MB   297.2 MB   -6.6%
//        3   16  48x48x48         3    543.0 MB   528.1 MB   +2.8%
//
// Worst error 16.3%; held out: 4/12/48x64x32/2 +7.2%, 3/20/32x64x48/2 -2.9%, 4/16/48^3/2 +2.7%.
// kEstimateTolerance (20%) is the bound the tests hold the estimate to. Most of the scatter is
// the CPU's convolution choice: LibTorch runs a convolution whose N x C x D x H <= 20480 without
// oneDNN, through a column buffer of C x 27 x voxels (batch 1 above); the GPU has no such buffer.
//
// The CPU measurement includes oneDNN's scratch buffers and glibc's allocator; on CUDA cuDNN's
// workspaces and the caching allocator's rounding add to the reserved bytes, which is why the
// planner keeps a margin (PlanOptions::margin) and can measure candidates on the GPU instead.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>

#include "u3d/core/config.h"

namespace u3d {

// The estimate, in parts (bytes).
struct StepMemory {
  int64_t parameters = 0;        // trainable parameter count
  int64_t weight_bytes = 0;      // parameters + gradients + optimizer states, float32
  int64_t activation_bytes = 0;  // tensors kept for the backward pass (input, blocks, heads, loss), unscaled
  int64_t transient_bytes = 0;   // gradients and recomputation alive at the backward pass's peak, unscaled
  int64_t total = 0;             // weight_bytes + kActivationFactor x (activation + transient) + kOverheadBytes
};

// The estimate for one step of a batch of `batch` patches (D, H, W) with `in_ch` input and `out_ch`
// output channels; `activation_bytes`: 4 (fp32) or 2 (bf16 / fp16 autocast). ConfigError for the
// openkbp_baseline architecture (not modelled) or a patch that does not divide by the strides' product
// per axis (patch_divisor, core/stage_geometry.h: 2^(levels - 1) by default); per-stage kernels and strides counted.
StepMemory estimate_step_memory(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch,
                                int64_t batch, int64_t activation_bytes, int64_t optimizer_states = 2,
                                int64_t loss_tensors = 0);
// estimate_step_memory(...).total
int64_t estimate_step_bytes(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch, int64_t batch,
                            int64_t activation_bytes, int64_t optimizer_states = 2, int64_t loss_tensors = 0);

// Runs one step on the CPU in float32 and returns the peak resident-memory increase in bytes:
// after a small warm-up step (thread pools, oneDNN kernels), malloc_trim(0), the kernel's peak
// RSS is reset ("5" to /proc/self/clear_refs), VmRSS is read, then the network is built
// (u3d::build_network, seed 0), a random batch (N, in, D, H, W) goes through forward_deep, the loss
// is the sum of every output, backward runs; the result is VmHWM - VmRSS (before). No optimizer:
// compare with estimate_step_bytes(..., /*activation_bytes=*/4, /*optimizer_states=*/0).
// IoError when /proc/self/status or clear_refs cannot be used.
int64_t measure_step_bytes_cpu(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch,
                               int64_t batch);

// Relative error the estimate keeps to measure_step_bytes_cpu (the calibration's worst, rounded up).
inline constexpr double kEstimateTolerance = 0.20;

// Returned by measure_step_bytes_cuda when the step does not fit the GPU.
inline constexpr int64_t kStepOutOfMemory = INT64_MAX;
// Whether a failed step means "does not fit": an out-of-memory error (is_out_of_memory, core/run.h)
// or what cuDNN and cuBLAS report near a full GPU instead ("unable to find an engine" when no
// algorithm's workspace fits, CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED, ...).
bool step_does_not_fit(const std::exception& e);
// Runs one real training step three times on CUDA device 0, as training runs it (TrainStep): bf16
// autocast, the layout of resolve_channels_last(cfg, cuda) (model/layout.h), the loss of the task
// (dice_ce with out_ch > 1 and deep supervision as configured, else masked_l1), the optimizer (sgd
// with momentum for optimizer_states 1, else adamw) with its step, eager; the first step autotunes.
// Training provides it (run_training_steps, train/step_probe.h) and `trainer plan` hands it in, so
// planning needs nothing of training.
using TrainingSteps = std::function<void(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch,
                                         int64_t batch, int64_t optimizer_states)>;
// One real training step's GPU memory on CUDA device 0: `steps` run with cuDNN autotuning on (its
// workspaces count). Returns the caching allocator's peak reserved bytes (what nvidia-smi sees),
// or kStepOutOfMemory when step_does_not_fit. The cache is emptied before and after. CudaError
// without a CUDA device.
int64_t measure_step_bytes_cuda(const TrainingSteps& steps, const ModelConfig& cfg, int64_t in_ch, int64_t out_ch,
                                const Shape3& patch, int64_t batch, int64_t optimizer_states = 2);

}  // namespace u3d
