// `trainer --benchmark --profile`: a kernel-category breakdown of the trainer's own training step,
// from LibTorch's profiler (Kineto; torch/csrc/autograd/profiler_kineto.h).
//
//   StepProfile p = profile_steps([&] { step.run(micro); }, /*steps=*/3, device);
//   print_step_profile(p);                  // table: category, ms per step, share; the top 10 ops
//   Json j = step_profile_json(p);          // {"benchmark": "step_profile", ...}
//
// What is measured: `steps` calls of `step` (after the benchmark's warm-up and timed steps, so cuDNN
// autotuning and the graph capture are over) under the profiler, the device synchronised after each.
//  - CPU: the CPU activity. Each operator's self time is its duration less its direct children's
//    (per thread, by nesting), as PyTorch's "self CPU time"; the categories sum every op's self time.
//  - CUDA: the CPU and CUDA activities; the categories sum the device's kernel, memcpy and memset
//    time, each kernel named by the CPU operator that launched it (linked correlation id) when the
//    profiler links it, else by its own kernel name. A replayed CUDA graph launches its kernels with
//    no operator: they are named by their kernel names (the category rules match those too).
// Times are ms per step (total / steps); shares are of the sum over categories (they add to 1).
//
// Categories, by the operator's (or kernel's) name, first rule that matches (op_category()):
// optimizer (_fused_*, _foreach_*, _amp_*: the update, gradient norm and clipping, loss scaling),
// convolution (conv, mm/addmm/bmm/matmul/linear, gemm), loss (the loss ops: nll_loss,
// binary_cross_entropy, l1/mse_loss, the fused loss kernels u3d::fused_loss), normalisation
// (batch/instance/group/layer norm, the fused norm kernels u3d::fused_norm_act), activation (relu, gelu, elu, sigmoid,
// tanh, softmax, threshold), copy/cast (copy_, to, _to_copy, clone, contiguous, cat, stack, memcpy, memset), reduction
// (sum, mean, max, min, norm,
// ...), elementwise (add, mul, div, where, clamp, fill_, zero_, ...), other (the rest, including the
// autograd engine's own bookkeeping).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "u3d/core/json.h"

namespace u3d {

// The categories, in the order they are printed.
const std::vector<std::string>& profile_categories();
// The category of an operator or kernel name ("aten::cudnn_convolution" -> "convolution").
std::string op_category(const std::string& name);

struct ProfileOp {
  std::string name, category;
  double ms_per_step = 0;  // self time (CPU) or device time (CUDA), per step
  int64_t calls = 0;       // over all profiled steps
};

struct StepProfile {
  int64_t steps = 0;
  std::string source;               // "cpu self time" | "cuda device time"
  std::vector<double> category_ms;  // per step, in profile_categories() order
  double total_ms = 0;              // per step, the sum of category_ms
  std::vector<ProfileOp> top;       // the 10 ops with the most time, most first
};

// Runs `step` `steps` times under the profiler on `device` (synchronised after each; CUDA activity
// when `device` is CUDA) and sums the events into categories.
StepProfile profile_steps(const std::function<void()>& step, int64_t steps, const torch::Device& device);
// The table on stdout: one row per category (ms per step, share), then the top 10 ops.
void print_step_profile(const StepProfile& profile);
// {"benchmark": "step_profile", "steps", "source", "total_ms_per_step", "categories": {name: {"ms", "share"}},
// "top_ops": [{"name", "category", "ms", "calls"}]}
Json step_profile_json(const StepProfile& profile);

}  // namespace u3d
