#include "u3d/plan/memory_model.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>
#include <malloc.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "u3d/core/errors.h"
#include "u3d/core/run.h"
#include "u3d/core/stage_geometry.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

// Fitted to measure_step_bytes_cpu (see memory_model.h for the table): the network's tensors are
// multiplied by kActivationFactor and kOverheadBytes is added.
constexpr double kActivationFactor = 1.206;
constexpr int64_t kOverheadBytes = 24'300'000;

// Tensors of the block's output size a ConvBlock keeps for the backward pass (model/unet.h:
// conv -> [dropout] -> [norm] -> [activation]).
int64_t conv_block_tensors(const ModelConfig& cfg, bool activate) {
  int64_t n = 1;                        // the convolution's output: saved by dropout, norm or activation
  if (cfg.dropout > 0) n += 1;          // the dropout's output (its mask is (N, C, 1, 1, 1))
  if (cfg.norm != Norm::kNone) n += 1;  // the norm's output
  if (!activate) return n - 1;          // the last tensor feeds a sum, which keeps nothing
  // The activation's input is kept by leaky_relu, gelu and elu; relu keeps its output instead.
  if (cfg.activation == Activation::kRelu) n -= 1;
  return n + 1;  // the activation's output, kept by the next convolution
}

// Parameters of a Conv3d / ConvBlock; `k`: the kernel's voxels (3 x 3 x 3 = 27).
int64_t conv_params(int64_t in, int64_t out, int64_t k, bool bias) { return in * out * k + (bias ? out : 0); }
int64_t norm_params(const ModelConfig& cfg, int64_t channels) { return cfg.norm == Norm::kNone ? 0 : 2 * channels; }
int64_t conv_block_params(const ModelConfig& cfg, int64_t in, int64_t out, int64_t k, bool bias) {
  return conv_params(in, out, k, bias) + norm_params(cfg, out);
}

}  // namespace

StepMemory estimate_step_memory(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch,
                                int64_t batch, int64_t activation_bytes, int64_t optimizer_states,
                                int64_t loss_tensors) {
  if (cfg.architecture == Architecture::kOpenKbpBaseline) {
    throw ConfigError("model.architecture: the memory model covers unet and resenc_unet, not openkbp_baseline");
  }
  const int64_t levels = cfg.levels;
  const Shape3 divisor = patch_divisor(cfg);
  for (size_t a = 0; a < 3; ++a) {
    if (patch[a] < divisor[a] || patch[a] % divisor[a] != 0) {
      throw ConfigError(
          fmt::format("data.patch_size: [{}, {}, {}] does not divide by the strides' product [{}, {}, {}]", patch[0],
                      patch[1], patch[2], divisor[0], divisor[1], divisor[2]));
    }
  }
  const bool residual = cfg.architecture == Architecture::kResEncUNet;
  const bool ckpt_encoder = cfg.activation_checkpointing != Checkpointing::kOff;
  const bool ckpt_decoder = cfg.activation_checkpointing == Checkpointing::kAll;
  const bool plain_bias = cfg.norm == Norm::kNone;
  std::vector<int64_t> f, voxels, kv,
      up;  // filters, voxels per sample, kernel voxels, up-conv kernel voxels at level l
  for (int64_t l = 0; l < levels; ++l) {
    f.push_back(std::min(cfg.base_filters << l, cfg.max_filters));
    const Shape3 scale = stage_scale(cfg, l), kernel = stage_kernel(cfg, l), stride = stage_stride(cfg, l);
    voxels.push_back((patch[0] / scale[0]) * (patch[1] / scale[1]) * (patch[2] / scale[2]));
    kv.push_back(kernel[0] * kernel[1] * kernel[2]);
    up.push_back(stride[0] * stride[1] * stride[2]);
  }
  const int64_t block = conv_block_tensors(cfg, /*activate=*/true);
  const int64_t sum_kept = cfg.activation == Activation::kRelu ? 0 : 1;  // residual sum, kept by the activation
  int64_t elems = batch * in_ch * voxels[0] * 4 / activation_bytes;      // the float32 input
  int64_t params = 0;
  int64_t largest_block = 0;  // elements of the largest block's tensors (recomputed when checkpointed)
  auto add_stage = [&](int64_t per_block, int64_t n_blocks, int64_t block_elems, bool checkpointed) {
    elems += (checkpointed ? 1 : per_block) * n_blocks * block_elems;
    largest_block = std::max(largest_block, per_block * block_elems);
  };
  int64_t prev = in_ch;
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t e = batch * f[l] * voxels[l];
    if (residual) {
      if (l == 0) {  // the stem
        add_stage(block, 1, e, ckpt_encoder);
        params += conv_block_params(cfg, prev, f[0], kv[0], /*bias=*/true);
        prev = f[0];
      }
      const int64_t blocks = residual_blocks(cfg, l);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t in = b == 0 ? prev : f[l];
        const bool stride = l > 0 && b == 0;
        int64_t per = block + conv_block_tensors(cfg, /*activate=*/false) + sum_kept + 1;
        if (in != f[l]) per += conv_block_tensors(cfg, /*activate=*/false) + (stride ? 1 : 0);
        add_stage(per, 1, e, ckpt_encoder);
        params += conv_block_params(cfg, in, f[l], kv[l], true) + conv_block_params(cfg, f[l], f[l], kv[l], true);
        if (in != f[l]) params += conv_block_params(cfg, in, f[l], 1, false);
      }
    } else {
      add_stage(block, cfg.convs_per_level, e, ckpt_encoder);
      for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
        params += conv_block_params(cfg, c == 0 ? prev : f[l], f[l], kv[l], plain_bias);
      }
    }
    prev = f[l];
  }
  for (int64_t l = levels - 2; l >= 0; --l) {
    const int64_t e = batch * f[l] * voxels[l];
    elems += 2 * e;  // the concatenation, kept by the first decoder convolution
    add_stage(block, cfg.convs_per_level, e, ckpt_decoder);
    params += conv_params(f[l + 1], f[l], up[l + 1], /*bias=*/true);
    for (int64_t c = 0; c < cfg.convs_per_level; ++c) {
      params += conv_block_params(cfg, c == 0 ? 2 * f[l] : f[l], f[l], kv[l], residual || plain_bias);
    }
  }
  int64_t head_elems = batch * out_ch * voxels[0];  // the head's output (and its loss tensors)
  params += conv_params(f[0], out_ch, 1, true);
  if (cfg.output_activation != OutputActivation::kNone) elems += head_elems;
  if (cfg.deep_supervision) {
    for (int64_t l = 1; l + 1 < levels; ++l) {
      head_elems += batch * out_ch * voxels[l];
      params += conv_params(f[l], out_ch, 1, true);
    }
  }
  elems += head_elems;

  StepMemory m;
  m.parameters = params;
  m.weight_bytes = params * 4 * (2 + optimizer_states);
  m.activation_bytes = elems * activation_bytes + loss_tensors * head_elems * 4;
  int64_t transient = 2 * batch * f[0] * voxels[0];  // gradients at the start of the backward pass
  if (ckpt_encoder) transient += largest_block;      // one block recomputed at a time
  m.transient_bytes = transient * activation_bytes;
  m.total = m.weight_bytes +
            static_cast<int64_t>(kActivationFactor * static_cast<double>(m.activation_bytes + m.transient_bytes)) +
            kOverheadBytes;
  return m;
}

int64_t estimate_step_bytes(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch, int64_t batch,
                            int64_t activation_bytes, int64_t optimizer_states, int64_t loss_tensors) {
  return estimate_step_memory(cfg, in_ch, out_ch, patch, batch, activation_bytes, optimizer_states, loss_tensors).total;
}

namespace {

// A "VmRSS:" style field of /proc/self/status, in bytes.
int64_t status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      std::istringstream fields(line.substr(name.size() + 1));
      int64_t kb = -1;
      fields >> kb;
      if (kb >= 0) return kb * 1024;
    }
  }
  throw IoError(fmt::format("/proc/self/status: no {} field (peak memory cannot be measured here)", name));
}

void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  if (!out) throw IoError("/proc/self/clear_refs: cannot write '5' to reset the peak resident set");
}

// One forward_deep + sum-of-outputs loss + backward; the network is built inside (seed 0).
void run_step(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch, int64_t batch) {
  torch::manual_seed(0);
  Network net = build_network(cfg, in_ch, out_ch);
  net->train();
  const torch::Tensor x = torch::randn({batch, in_ch, patch[0], patch[1], patch[2]});
  torch::Tensor loss;
  for (const auto& out : net->forward_deep(x)) {
    const torch::Tensor s = out.sum();
    loss = loss.defined() ? loss + s : s;
  }
  loss.backward();
}

}  // namespace

int64_t measure_step_bytes_cpu(const ModelConfig& cfg, int64_t in_ch, int64_t out_ch, const Shape3& patch,
                               int64_t batch) {
  // Warm-up: the same step once (thread pools, oneDNN primitives, allocator), so what follows is a
  // steady-state step.
  run_step(cfg, in_ch, out_ch, patch, batch);
  ::malloc_trim(0);
  reset_peak_rss();
  const int64_t before = status_field("VmRSS");
  run_step(cfg, in_ch, out_ch, patch, batch);
  const int64_t peak = status_field("VmHWM");
  ::malloc_trim(0);
  return std::max<int64_t>(0, peak - before);
}

bool step_does_not_fit(const std::exception& e) {
  if (is_out_of_memory(e)) return true;
  const std::string what = e.what();
  for (const char* sign : {"unable to find an engine", "CUDNN_STATUS_ALLOC_FAILED", "CUBLAS_STATUS_ALLOC_FAILED",
                           "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE", "out of memory"}) {
    if (what.find(sign) != std::string::npos) return true;
  }
  return false;
}

int64_t measure_step_bytes_cuda(const TrainingSteps& steps, const ModelConfig& model, int64_t in_ch, int64_t out_ch,
                                const Shape3& patch, int64_t batch, int64_t optimizer_states) {
  if (!torch::cuda::is_available()) throw CudaError("measuring a training step's GPU memory needs a CUDA device");
  const torch::Device device(torch::kCUDA, 0);
  // The step as training runs it (`steps`), cuDNN autotuning on (its workspaces count).
  auto& ctx = at::globalContext();
  const bool autotune = ctx.benchmarkCuDNN();
  ctx.setBenchmarkCuDNN(true);
  init_cuda_allocator();
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  int64_t reserved = 0;
  try {
    steps(model, in_ch, out_ch, patch, batch, optimizer_states);  // the first autotunes; then steady state
    torch::cuda::synchronize();
    reserved = gpu_memory_peaks(device).reserved;
  } catch (const std::exception& e) {
    ctx.setBenchmarkCuDNN(autotune);
    if (!step_does_not_fit(e)) throw;
    (void)cudaGetLastError();
    reserved = kStepOutOfMemory;
  }
  ctx.setBenchmarkCuDNN(autotune);
  c10::cuda::CUDACachingAllocator::emptyCache();
  return reserved;
}

}  // namespace u3d
