#include "u3d/model/layout.h"

#include <c10/util/strides.h>
#include <fmt/format.h>

#include "u3d/model/channels_last_norm.h"

namespace u3d {

Norm network_norm(const ModelConfig& cfg) {
  return cfg.architecture == Architecture::kOpenKbpBaseline ? Norm::kBatch : cfg.norm;
}

bool resolve_channels_last(const ModelConfig& cfg, const torch::Device& device) {
  switch (cfg.channels_last) {
    case Toggle::kOn: return true;
    case Toggle::kOff: return false;
    case Toggle::kAuto: break;
  }
  return device.is_cuda();  // every norm keeps NDHWC (model/channels_last_norm.h; docs/performance.md)
}

std::string channels_last_reason(const ModelConfig& cfg, const torch::Device& device) {
  if (cfg.channels_last != Toggle::kAuto) return fmt::format("model.channels_last: {}", to_string(cfg.channels_last));
  if (!device.is_cuda()) return "auto: off on CPU";
  switch (network_norm(cfg)) {
    case Norm::kInstance: return "auto: on with instance norm (channels-last instance norm)";
    case Norm::kGroup: return "auto: on with group norm (channels-last group norm)";
    case Norm::kBatch: return "auto: on with batch norm (cuDNN keeps NDHWC)";
    case Norm::kNone: return "auto: on without norm";
  }
  return "auto";
}

void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    // 5-D and a 2D U-Net's 4-D weights; also 1-channel weights (model/channels_last_norm.h)
    if (p.dim() >= 4) p.set_data(strictly_channels_last(p));
  }
  for (auto& b : module.buffers()) {
    if (b.dim() >= 4) b.set_data(strictly_channels_last(b));
  }
}

void set_layout(torch::nn::Module& module, bool channels_last) {
  torch::NoGradGuard no_grad;
  auto relayout = [channels_last](torch::Tensor& t) {
    if (t.dim() != 5 && t.dim() != 4) return;  // 4-D: a 2D U-Net's weights
    const bool plain = t.strides() == c10::IntArrayRef(c10::contiguous_strides(t.sizes()));
    const torch::Tensor u = channels_last ? strictly_channels_last(t)
                            : plain       ? t
                                          : torch::empty_like(t, at::MemoryFormat::Contiguous).copy_(t);
    if (!u.is_same(t)) t.set_data(u);
  };
  for (auto& p : module.parameters()) relayout(p);
  for (auto& b : module.buffers()) relayout(b);
}

}  // namespace u3d
