// The memory layout of a network's 5-D weights and inputs: NCDHW (contiguous) or NDHWC
// (ChannelsLast3d, the layout cuDNN's fastest 3D kernels use). Training (train_step.h), validation,
// prediction and the benchmarks decide it with resolve_channels_last() and put a network in it with
// set_layout() (or to_channels_last() before an optimizer is made).
#pragma once
#include <torch/torch.h>

#include <string>

#include "u3d/core/config.h"

namespace u3d {

// The norm the network's blocks use: model.norm, batch norm for the OpenKBP baseline.
Norm network_norm(const ModelConfig& cfg);
// model.channels_last for `device`: on/off as set; auto is on with CUDA (every norm keeps the
// layout) and off on CPU.
bool resolve_channels_last(const ModelConfig& cfg, const torch::Device& device);
// Why resolve_channels_last() decided as it did, for the log: "auto: on with instance norm
// (channels-last instance norm)".
std::string channels_last_reason(const ModelConfig& cfg, const torch::Device& device);
// Converts every 5-D parameter and buffer (and 4-D: a 2D U-Net's weights, to ChannelsLast) of `module` to
// ChannelsLast3d in place (set_data: the tensors keep their identity, so an optimizer made before still holds them;
// make it after, so its moments take the same layout).
void to_channels_last(torch::nn::Module& module);

// Puts every 5-D (and 4-D) parameter and buffer of `module` in the run's layout: ChannelsLast3d when
// `channels_last`, else contiguous (set_data, identities kept). After loading a checkpoint written
// in the other layout (on the CPU, or with model.channels_last: off), call this and then
// Optimizer::match_parameter_layout().
void set_layout(torch::nn::Module& module, bool channels_last);

}  // namespace u3d
