// Model files for other programs (model/model_export.h): the safetensors layout, model.pt read back
// by LibTorch's own unpickler, and the traced TorchScript network equal to the C++ forward. The
// Python side (torch.load weights_only, the safetensors package, scripts/python/u3d_model.py) is
// checked by tests/integration/watch_and_export_test.sh.
#include <gtest/gtest.h>
#include <torch/script.h>

#include <fmt/ranges.h>

#include <cstring>
#include <sstream>

#include "expectations.h"
#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/model/model_export.h"
#include "u3d/model/unet.h"

namespace u3d {
namespace {

ModelConfig small_model(Architecture architecture, Norm norm) {
  ModelConfig m = test::unet_config(3);
  m.architecture = architecture;
  m.norm = norm;
  if (architecture == Architecture::kResEncUNet) {
    m.convs_per_level = 1;
    m.blocks_per_level = {1, 2, 2};
  }
  return m;
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return n;
}

TEST(ModelExport, SafetensorsHoldsEveryTensorAtItsOffsetWithTheMetadata) {
  torch::manual_seed(0);
  auto net = build_network(small_model(Architecture::kUNet, Norm::kBatch), 2, 3);
  const NamedTensors tensors = export_tensors(*net);
  const std::string bytes = safetensors_bytes(tensors, {{"task", "segmentation"}, {"note", "a \"quoted\"\nline"}});
  const uint64_t n = header_length(bytes);
  ASSERT_EQ(n % 8, 0u);  // the data starts 8-byte aligned
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("__metadata__": {"note": "a \"quoted\"\nline", "task": "segmentation"})"), std::string::npos)
      << header.substr(0, 200);
  // Batch norm brings running statistics (float32) and num_batches_tracked (int64).
  EXPECT_NE(header.find(R"("encoder0.0.norm.running_mean": {"dtype": "F32")"), std::string::npos);
  EXPECT_NE(header.find(R"("encoder0.0.norm.num_batches_tracked": {"dtype": "I64", "shape": [])"), std::string::npos);
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
    const std::string entry =
        fmt::format("\"{}\": {{\"dtype\": \"{}\", \"shape\": [{}], \"data_offsets\": [{}, {}]}}", name,
                    safetensors_dtype(t.scalar_type()), fmt::join(t.sizes(), ", "), offset, offset + size);
    ASSERT_NE(header.find(entry), std::string::npos) << entry;
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + offset, t.data_ptr(), size), 0) << name;
    offset += size;
  }
  EXPECT_EQ(bytes.size(), 8 + n + offset);
  // Every parameter and buffer of the network, under its LibTorch name.
  EXPECT_EQ(tensors.size(), net->parameters().size() + net->buffers().size());
}

TEST(ModelExport, ModelPtIsAPlainDictOfTensorsConfigAndMeta) {
  torch::manual_seed(0);
  auto net = build_network(small_model(Architecture::kUNet, Norm::kInstance), 1, 2);
  const NamedTensors tensors = export_tensors(*net);
  const std::string bytes = state_dict_pt_bytes(tensors, "model:\n  levels: 3\n", {{"task", "dose"}});
  // torch.save's zip layout; LibTorch's unpickler reads it back (Python: tests/integration).
  const auto root = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  EXPECT_EQ(root.at("config").toStringRef(), "model:\n  levels: 3\n");
  EXPECT_EQ(root.at("meta").toGenericDict().at("task").toStringRef(), "dose");
  const auto state = root.at("state_dict").toGenericDict();
  ASSERT_EQ(state.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(torch::equal(state.at(name).toTensor(), t)) << name;
  // No TorchScript type tags: torch.load(weights_only=True) refuses torch.jit globals.
  EXPECT_EQ(bytes.find("restore_type_tag"), std::string::npos);
}

TEST(ModelExport, TracedTorchScriptEqualsTheNetworkOnOtherShapes) {
  for (const auto architecture : {Architecture::kUNet, Architecture::kResEncUNet}) {
    torch::manual_seed(1);
    auto net = build_network(small_model(architecture, Norm::kInstance), 2, 3);
    net->eval();
    const std::string bytes = torchscript_bytes(*net, {1, 2, 8, 8, 8}, R"({"task": "segmentation"})");
    std::istringstream in(bytes);
    torch::jit::ExtraFilesMap extra{{"meta.json", ""}};
    auto module = torch::jit::load(in, torch::kCPU, extra);
    EXPECT_EQ(extra["meta.json"], R"({"task": "segmentation"})");
    // The module's parameters carry the network's names.
    std::map<std::string, torch::Tensor> params;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) params[p.name] = p.value;
    for (const auto& p : net->named_parameters()) {
      ASSERT_TRUE(params.count(p.key())) << p.key();
      EXPECT_TRUE(torch::equal(params[p.key()], p.value()));
      EXPECT_TRUE(p.value().requires_grad()) << "the export must leave the network trainable";
    }
    torch::NoGradGuard no_grad;
    const auto x = torch::randn({2, 2, 16, 8, 24});  // another batch and shape than the trace's
    const auto expected = net->forward(x);
    const auto got = module.forward({x}).toTensor();
    EXPECT_TRUE(torch::equal(got, expected)) << (got - expected).abs().max().item<float>();
  }
}

TEST(ModelExport, YamlValuesBecomeJson) {
  test::expect_outputs(yaml_value_json, {{"[64, 64, 32]", "[64, 64, 32]"},
                                         {"instance", "\"instance\""},
                                         {"0.01", "0.01"},
                                         {"true", "true"},
                                         {"[]", "[]"},
                                         {"[ct, \"a b\"]", "[\"ct\", \"a b\"]"}});
  EXPECT_EQ(json_string("tab\there \\ \x01"), "\"tab\\there \\\\ \\u0001\"");
}

}  // namespace
}  // namespace u3d
