// Model files that other programs load without this one (`trainer export`, app/export_command.cpp):
//
//   model.safetensors  every parameter and buffer of the network under its LibTorch name
//                      ("encoder0.0.conv.weight", "up0.bias", ...), CPU, contiguous, in its own
//                      dtype (float32; batch norm's num_batches_tracked int64), with the metadata
//                      below as the header's "__metadata__" (string -> string). Format:
//                      u64 little-endian header length, JSON header padded with spaces to a
//                      multiple of 8, then the tensors' bytes back to back.
//   model.pt           {"state_dict": {name: tensor}, "config": <resolved YAML>, "meta": {str: str}}
//                      in torch.save's zip layout, which torch.load(path, weights_only=True) reads
//                      with default arguments (plain dicts: no TorchScript type tags).
//   model.ts           TorchScript: the C++ network traced in eval mode, parameters and buffers as
//                      module attributes under the same names, forward((N, C_in, D, H, W) float32)
//                      -> (N, C_out, D, H, W); the metadata as the extra file "meta.json".
//
// Metadata keys (ModelMeta, every value a string): format "u3d-model", format_version "1", task,
// architecture, in_channels, out_channels, model (JSON object of the resolved model.* keys),
// config (YAML), channels, labels, patch_size, spacing (JSON), normalize (JSON), target_scale,
// size_divisor, version, commit, checkpoint, epoch. scripts/python/u3d_model.py reads them.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "u3d/core/text.h"
#include "u3d/model/unet.h"

namespace u3d {

using ModelMeta = std::map<std::string, std::string>;
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Parameters then buffers of `net`, detached, on the CPU, contiguous, in module order.
NamedTensors export_tensors(NetworkImpl& net);
// The safetensors dtype name ("F32", "I64", ...); IoError for a dtype the format lacks.
std::string safetensors_dtype(torch::ScalarType type);
// The bytes of a safetensors file holding `tensors` and `meta`.
std::string safetensors_bytes(const NamedTensors& tensors, const ModelMeta& meta);
// The bytes of model.pt (layout above).
std::string state_dict_pt_bytes(const NamedTensors& tensors, const std::string& config_yaml, const ModelMeta& meta);
// The bytes of model.ts: `net` (eval mode, on the CPU) traced on a zero input `example_shape`
// (N, C_in, D, H, W), with `meta_json` as extra file "meta.json".
std::string torchscript_bytes(NetworkImpl& net, const std::vector<int64_t>& example_shape,
                              const std::string& meta_json);

// JSON text of a string map (keys sorted), one line (core/json.h).
std::string json_object(const std::map<std::string, std::string>& values);
// A YAML flow value as printed by get_value ("[64, 64, 64]", "instance", "0.01", "true") as JSON:
// numbers and booleans bare, lists as arrays, anything else a JSON string.
std::string yaml_value_json(const std::string& yaml_value);

}  // namespace u3d
