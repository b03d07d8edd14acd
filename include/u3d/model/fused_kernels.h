// model.fused_kernels: whether the project's CUDA kernels replace ATen in training, decided once per
// training step for its device, family by family (kernels/fused_families.h: batch_norm, group_norm,
// decoder_concat, loss).
//
//   off   ATen everywhere (model/channels_last_norm.h, model/channels_last_batch_norm.h, train/losses.h)
//   on    every family, for every layer and loss whose tensors the kernels take (training; batch norm
//         in eval mode keeps ATen; the Dice + CE or BCE + Dice loss: kernels/fused_loss.h, train/losses.h
//         Loss), on CUDA tensors; a ConfigError without a CUDA device or without
//         kernels in the build
//   auto  on CUDA, the families whose table in verified_architectures(family) holds the GPU's
//         architecture: those whose equality tests (GPU tests FusedNormAct*, FusedLoss*, gpu-check's
//         core section) passed on it and whose step measured no slower than ATen's there (the speed
//         script's fused-against-unfused table), both recorded in docs/performance.md; the other
//         families off; everything off on the CPU
// Parameters, buffers and checkpoints are the same either way: a run may switch on --resume.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/kernels/fused_families.h"

namespace u3d {

struct FusedKernelsChoice {
  kernels::Families families = kernels::kNoFamilies;
  std::string reason;  // for the log: "auto: off (sm_90 not yet verified ..., docs/performance.md)"
  bool on() const { return families != kernels::kNoFamilies; }  // any family on
};

// ConfigError for `on` without CUDA or without the kernels in the build.
FusedKernelsChoice resolve_fused_kernels(const ModelConfig& cfg, const torch::Device& device);

// GPU architectures ("sm_90") on which auto turns `family` on. Empty until a GPU run records them.
const std::vector<std::string>& verified_architectures(kernels::Family family);
// The families auto turns on for a GPU architecture ("sm_90").
kernels::Families verified_families(const std::string& architecture);

// kernels::set_enabled(families) for the life of the object, the previous set restored after;
// `on` true: every family, false: none.
class FusedKernelsScope {
 public:
  explicit FusedKernelsScope(kernels::Families families);
  explicit FusedKernelsScope(bool on) : FusedKernelsScope(on ? kernels::kAllFamilies : kernels::kNoFamilies) {}
  ~FusedKernelsScope();
  FusedKernelsScope(const FusedKernelsScope&) = delete;
  FusedKernelsScope& operator=(const FusedKernelsScope&) = delete;

 private:
  kernels::Families previous_;
};

}  // namespace u3d
