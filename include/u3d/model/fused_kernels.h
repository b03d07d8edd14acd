// model.fused_kernels: whether the networks' norm + activation layers run in the project's CUDA
// kernels (kernels/fused_norm_act.h) instead of ATen, decided once per training step for its device.
//
//   off   ATen everywhere (model/channels_last_norm.h, model/channels_last_batch_norm.h)
//   on    the kernels for every norm layer they take (training; batch norm in eval mode keeps ATen),
//         and every decoder's first convolution over (up, skip) without the concatenation copy
//         (model/split_concat_conv.h), and the Dice + CE or BCE + Dice loss (kernels/fused_loss.h,
//         train/losses.h Loss), on CUDA tensors;
//         a ConfigError without a CUDA device or without kernels in the build
//   auto  on for a CUDA GPU whose architecture is in verified_architectures(): those whose equality
//         tests (GPU tests FusedNormAct*, gpu-check's core section) passed and are recorded in
//         docs/performance.md; off otherwise, and always off on the CPU
// Parameters, buffers and checkpoints are the same either way: a run may switch on --resume.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

struct FusedKernelsChoice {
  bool on = false;
  std::string reason;  // for the log: "auto: off (sm_90 not yet verified, docs/performance.md)"
};

// ConfigError for `on` without CUDA or without the kernels in the build.
FusedKernelsChoice resolve_fused_kernels(const ModelConfig& cfg, const torch::Device& device);

// GPU architectures ("sm_90") on which auto turns the kernels on. Empty until a GPU run records them.
const std::vector<std::string>& verified_architectures();

// kernels::set_enabled(on) for the life of the object, the previous value restored after.
class FusedKernelsScope {
 public:
  explicit FusedKernelsScope(bool on);
  ~FusedKernelsScope();
  FusedKernelsScope(const FusedKernelsScope&) = delete;
  FusedKernelsScope& operator=(const FusedKernelsScope&) = delete;

 private:
  bool previous_;
};

}  // namespace u3d
