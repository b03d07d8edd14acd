#include "u3d/model/model_export.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/script.h>
#include <yaml-cpp/yaml.h>

#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/json.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

Json json_node(const YAML::Node& node) {
  if (node.IsSequence()) {
    Json items = Json::array();
    for (const auto& item : node) items.push_back(json_node(item));
    return items;
  }
  if (node.IsMap()) {
    std::map<std::string, Json> values;  // keys sorted
    for (const auto& kv : node) values[kv.first.as<std::string>()] = json_node(kv.second);
    Json object = Json::object();
    for (auto& [k, v] : values) object[k] = std::move(v);
    return object;
  }
  if (!node.IsDefined() || node.IsNull()) return nullptr;
  const std::string text = node.as<std::string>();
  if (text == "true" || text == "false") return text == "true";
  if (const auto i = parse_int(text)) return *i;
  if (const auto d = parse_double(text)) return *d;
  return text;
}

// The module path of `name` ("encoder0.0.conv" of "encoder0.0.conv.weight") inside `root`,
// made of empty TorchScript modules as needed.
torch::jit::Module submodule_for(torch::jit::Module root, const std::string& name, std::string* leaf, int* counter) {
  const auto parts = split(name, ".");
  torch::jit::Module current = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!current.hasattr(parts[i])) {
      current.register_module(parts[i], torch::jit::Module(fmt::format("__torch__.u3d.Block{}", (*counter)++)));
    }
    current = current.attr(parts[i]).toModule();
  }
  *leaf = parts.back();
  return current;
}

void append(std::string* out, const void* data, size_t size) { out->append(static_cast<const char*>(data), size); }

}  // namespace

NamedTensors export_tensors(NetworkImpl& net) {
  NamedTensors out;
  for (const auto& p : net.named_parameters(/*recurse=*/true)) {
    out.emplace_back(p.key(), p.value().detach().to(torch::kCPU).contiguous());
  }
  for (const auto& b : net.named_buffers(/*recurse=*/true)) {
    out.emplace_back(b.key(), b.value().detach().to(torch::kCPU).contiguous());
  }
  return out;
}

std::string safetensors_dtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat: return "F32";
    case torch::kDouble: return "F64";
    case torch::kHalf: return "F16";
    case torch::kBFloat16: return "BF16";
    case torch::kLong: return "I64";
    case torch::kInt: return "I32";
    case torch::kShort: return "I16";
    case torch::kChar: return "I8";
    case torch::kByte: return "U8";
    case torch::kBool: return "BOOL";
    default: throw IoError(fmt::format("safetensors has no dtype for {}", c10::toString(type)));
  }
}

std::string safetensors_bytes(const NamedTensors& tensors, const ModelMeta& meta) {
  Json header_json = {{"__metadata__", Json(meta)}};
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const size_t bytes = t.numel() * t.element_size();
    header_json[name] = {{"dtype", safetensors_dtype(t.scalar_type())},
                         {"shape", t.sizes().vec()},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header = json_line(header_json);
  header.append((8 - header.size() % 8) % 8, ' ');  // the tensors start 8-byte aligned
  std::string out;
  out.reserve(8 + header.size() + offset);
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));  // little endian
  out += header;
  for (const auto& [name, t] : tensors) append(&out, t.data_ptr(), t.numel() * t.element_size());
  return out;
}

std::string state_dict_pt_bytes(const NamedTensors& tensors, const std::string& config_yaml, const ModelMeta& meta) {
  c10::Dict<std::string, torch::Tensor> state;
  for (const auto& [name, t] : tensors) state.insert(name, t);
  c10::Dict<std::string, std::string> meta_dict;
  for (const auto& [k, v] : meta) meta_dict.insert(k, v);
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("state_dict", state);
  root.insert("config", config_yaml);
  root.insert("meta", meta_dict);

  // torch.save's layout: data.pkl with persistent ids of storages data/<n>. Aggregates untagged,
  // so torch.load's weights_only unpickler needs no TorchScript globals.
  std::vector<char> pickle;
  std::vector<std::string> storage_names;
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
                              [&](const at::Tensor&) {
                                storage_names.push_back(std::to_string(storage_names.size()));
                                return storage_names.back();
                              },
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(root);
  pickler.stop();

  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    append(&out, data, size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("byteorder", "little", 6);
  size_t i = 0;
  for (const auto& t : pickler.tensorData()) {
    const auto storage = t.contiguous();
    writer.writeRecord("data/" + storage_names[i++], storage.data_ptr(), storage.nbytes());
  }
  writer.writeEndOfFile();
  return out;
}

std::string torchscript_bytes(NetworkImpl& net, const std::vector<int64_t>& example_shape,
                              const std::string& meta_json) {
  net.eval();
  torch::NoGradGuard no_grad;
  torch::jit::Module module("__torch__.u3d.Model");
  int counter = 0;
  // The tracer records a tensor it finds among the module's attributes as an attribute read, so
  // the network's own tensors (not copies) become the module's parameters and buffers; they stop
  // requiring gradients for the trace.
  struct RestoreGrad {
    std::vector<torch::Tensor> tensors;
    ~RestoreGrad() {
      for (auto& t : tensors) t.requires_grad_(true);
    }
  } trainable;
  for (const auto& p : net.named_parameters(/*recurse=*/true)) {
    std::string leaf;
    auto owner = submodule_for(module, p.key(), &leaf, &counter);
    torch::Tensor t = p.value();
    if (t.requires_grad()) trainable.tensors.push_back(t);
    t.requires_grad_(false);
    owner.register_parameter(leaf, t, /*is_buffer=*/false);
  }
  for (const auto& b : net.named_buffers(/*recurse=*/true)) {
    std::string leaf;
    auto owner = submodule_for(module, b.key(), &leaf, &counter);
    owner.register_buffer(leaf, b.value());
  }
  const auto input = torch::zeros(example_shape);
  auto traced = torch::jit::tracer::trace(
      {input}, [&](torch::jit::Stack in) -> torch::jit::Stack { return {net.forward(in[0].toTensor())}; },
      [](const torch::autograd::Variable&) { return std::string(); }, /*strict=*/true, /*force_outplace=*/false,
      &module);
  auto* forward = module._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), traced.first->graph);
  module.type()->addMethod(forward);
  std::ostringstream out;
  module.save(out, torch::jit::ExtraFilesMap{{"meta.json", meta_json}});
  return out.str();
}

std::string json_object(const std::map<std::string, std::string>& values) { return json_line(Json(values)); }

std::string yaml_value_json(const std::string& yaml_value) { return json_line(json_node(YAML::Load(yaml_value))); }

}  // namespace u3d
