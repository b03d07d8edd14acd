// `trainer bench-norm SITES.json [--steps N] [--warmup W] [--device auto|cuda|cpu]`: a network's
// normalisation + activation layers timed alone, three ways on the same tensors (issue 53: "benchmark
// cuDNN's patterns beside ours and pick by measurement"):
//
//   aten   the trainer's path with model.fused_kernels off (model/channels_last_batch_norm.h,
//          model/channels_last_norm.h: ATen's kernels, then the activation's op)
//   ours   the same call with the family's fused kernels on (kernels/fused_norm_act.h)
//   cudnn  cuDNN's fused graphs (kernels/cudnn_norm_act.h)
//
// SITES.json, as scripts/bench/norm_bench.py writes it from the PyTorch mirror of a network (one site
// per distinct norm layer input; `count` layers share it):
//
//   {"precision": "bf16" | "fp16" | "fp32",
//    "sites": [{"norm": "batch" | "instance", "shape": [N, C, D, H, W] (or [N, C, H, W]: D = 1),
//               "activation": "relu" | "leaky_relu" | "none", "negative_slope": 0.01,
//               "eps": 1e-5, "momentum": 0.1, "count": 2}, ...]}
//
// x (N, C, D, H, W) ChannelsLast3d in the precision's dtype, random normal; weight 1 + 0.1 N(0, 1),
// bias 0.1 N(0, 1), float32; dy random normal. Per site and way: forward ms, forward + backward ms
// (the gradients of x, weight and bias), each the mean over N runs after W untimed ones, timed by CUDA
// events on a GPU (wall clock on the CPU); times of small layers include the launch time, which the
// trainer's CUDA graph does not pay. Before timing, ours and cudnn are compared with aten: max |a - b|
// / max |b| of y, dx, dweight and dbias. A way that cannot run says why ("not built", "not on the CPU",
// cuDNN's refusal) and is left out of the sums. Prints a table (stderr) and one JSON line (stdout):
//
//   {"benchmark": "norm", "device": ..., "gpu": ..., "precision": ..., "cudnn": "9.19.0", "layers": 18,
//    "sites": [{..., "aten": {"status": "ok", "fwd_ms": ..., "fwd_bwd_ms": ..., }, "ours": {...,
//    "y_diff": ..., "dx_diff": ..., "dweight_diff": ..., "dbias_diff": ...}, "cudnn": {...}}],
//    "sum_ms": {"aten": ..., "ours": ..., "cudnn": ...},       // fwd_bwd_ms x count over the sites
//    "sum_sites": {"aten": 7, "ours": 7, "cudnn": 5}}          // sites each sum covers
#pragma once
#include <string>

namespace u3d {

struct NormBenchCommand {
  std::string sites;            // SITES.json
  int steps = 20;               // timed runs per site and way
  int warmup = 5;               // untimed runs before them
  std::string device = "auto";  // auto: CUDA when there is a GPU
};

int norm_benchmark_command(const NormBenchCommand& cmd);

}  // namespace u3d
