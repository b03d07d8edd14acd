#include "u3d/predict/exported_model.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "u3d/core/errors.h"
#include "u3d/core/json.h"
#include "u3d/core/output_head.h"
#include "u3d/core/text.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/model_export.h"
#include "u3d/model/unet.h"

namespace u3d {

namespace fs = std::filesystem;

PredictionMember member_from_export(const fs::path& dir, const fs::path& checkpoints) {
  const fs::path file = dir / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw IoError(
        fmt::format("--model {}: no model.safetensors in it (a folder written by trainer export)", dir.string()));
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_size = 0;
  if (bytes.size() >= 8) std::memcpy(&header_size, bytes.data(), 8);  // little-endian, as x86 and ARM
  if (bytes.size() < 8 || header_size > bytes.size() - 8) {
    throw DataError(fmt::format("{}: not a safetensors file (header size)", file.string()));
  }
  const Json header = parse_json(bytes.substr(8, header_size), file.string());
  const size_t data_start = 8 + header_size;
  const Json meta = header.value("__metadata__", Json::object());
  if (meta.value("format", "") != "u3d-model") {
    throw DataError(
        fmt::format("{}: no u3d-model metadata; --model takes a folder written by trainer export", file.string()));
  }
  CheckpointInfo info;
  info.config_yaml = meta.value("config", "");
  info.task = meta.value("task", "");
  info.version = meta.value("version", "");
  info.commit = meta.value("commit", "");
  const auto in_channels = parse_int(meta.value("in_channels", ""));
  const auto out_channels = parse_int(meta.value("out_channels", ""));
  if (!in_channels || !out_channels || info.config_yaml.empty()) {
    throw DataError(fmt::format("{}: metadata without config, in_channels or out_channels", file.string()));
  }
  info.in_channels = *in_channels;
  info.out_channels = *out_channels;
  info.state.epoch = parse_int(meta.value("epoch", "")).value_or(0);
  const Config trained = load_config_from_string(info.config_yaml, file.string() + " (config)");
  Network net = build_network(trained.model, info.in_channels, network_channels(trained.model.head, info.out_channels));
  std::set<std::string> expected;
  torch::NoGradGuard no_grad;
  for (const auto& named : export_tensors(*net)) expected.insert(named.first);
  const auto load = [&](const std::string& name, torch::Tensor target) {
    if (!header.contains(name)) throw DataError(fmt::format("{}: no tensor '{}' of the network", file.string(), name));
    const Json& h = header.at(name);
    const auto shape = h.at("shape").get<std::vector<int64_t>>();
    const auto offsets = h.at("data_offsets").get<std::vector<size_t>>();
    const size_t nbytes = static_cast<size_t>(target.numel()) * target.element_size();
    if (h.at("dtype").get<std::string>() != safetensors_dtype(target.scalar_type()) || shape != target.sizes().vec() ||
        offsets.size() != 2 || offsets[1] - offsets[0] != nbytes || data_start + offsets[1] > bytes.size()) {
      throw DataError(fmt::format("{}: tensor '{}' is {} {}, the network's {} {}", file.string(), name,
                                  h.at("dtype").get<std::string>(), shape_text(shape),
                                  safetensors_dtype(target.scalar_type()), shape_text(target.sizes().vec())));
    }
    const torch::Tensor cpu = target.detach().to(torch::kCPU).contiguous();
    std::memcpy(cpu.data_ptr(), bytes.data() + data_start + offsets[0], nbytes);
    target.copy_(cpu);
  };
  for (auto& p : net->named_parameters(/*recurse=*/true)) load(p.key(), p.value());
  for (auto& b : net->named_buffers(/*recurse=*/true)) load(b.key(), b.value());
  for (const auto& item : header.items()) {
    if (item.key() != "__metadata__" && !expected.count(item.key())) {
      throw DataError(fmt::format("{}: tensor '{}' is not one of the network's", file.string(), item.key()));
    }
  }
  fs::create_directories(checkpoints);
  save_checkpoint(checkpoints / "best.pt", info, *net, nullptr);
  PredictionMember m;
  m.checkpoint = checkpoints / "best.pt";
  m.info = read_checkpoint_info(m.checkpoint);
  m.trained = trained;
  return m;
}

}  // namespace u3d
