// model.kernel_sizes and model.strides (issue 39): parsed, validated with one line naming the key,
// and the patch divides by the strides' product per axis.
#include <gtest/gtest.h>

#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/stage_geometry.h"

namespace u3d {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    load_config_from_string(yaml, "exp.yaml");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for:\n" << yaml;
  return "";
}

const char* kThickSlice = R"(
data: {path: d.h5, patch_size: [8, 64, 64]}
model:
  levels: 4
  kernel_sizes: [[1, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3]]
  strides: [[1, 1, 1], [1, 2, 2], [2, 2, 2], [2, 2, 2]]
)";

TEST(StageGeometry, DefaultsAreTodaysNetwork) {
  const Config c = load_config_from_string("data: {path: d.h5}\n", "exp.yaml");
  EXPECT_TRUE(c.model.kernel_sizes.empty());
  EXPECT_TRUE(c.model.strides.empty());
  EXPECT_EQ(stage_kernel(c.model, 2), (Shape3{3, 3, 3}));
  EXPECT_EQ(stage_stride(c.model, 0), (Shape3{1, 1, 1}));
  EXPECT_EQ(stage_stride(c.model, 3), (Shape3{2, 2, 2}));
  EXPECT_EQ(patch_divisor(c.model), (Shape3{8, 8, 8}));  // 2^(levels - 1)
}

TEST(StageGeometry, PerAxisTriplesParseAndTheDivisorIsTheirProduct) {
  const Config c = load_config_from_string(kThickSlice, "exp.yaml");
  ASSERT_EQ(c.model.kernel_sizes.size(), 4u);
  EXPECT_EQ(c.model.kernel_sizes[0], (Shape3{1, 3, 3}));
  EXPECT_EQ(c.model.strides[1], (Shape3{1, 2, 2}));
  EXPECT_EQ(stage_scale(c.model, 2), (Shape3{2, 4, 4}));
  // D is halved twice, H and W three times: a patch 4 deep is valid (2^(levels - 1) = 8 refused it).
  EXPECT_EQ(patch_divisor(c.model), (Shape3{4, 8, 8}));
  std::string yaml = kThickSlice;
  yaml.replace(yaml.find("[8, 64, 64]"), 11, "[4, 64, 64]");
  EXPECT_EQ(load_config_from_string(yaml, "exp.yaml").data.patch_size, (Shape3{4, 64, 64}));
}

TEST(StageGeometry, ABadListIsRefusedNamingTheKey) {
  const std::string base = "data: {path: d.h5, patch_size: [32, 32, 32]}\nmodel:\n  levels: 3\n";
  std::string e = error_of(base + "  strides: [[1, 1, 1], [2, 2, 2]]\n");
  EXPECT_NE(e.find("model.strides: 2 triples for model.levels = 3"), std::string::npos) << e;
  e = error_of(base + "  kernel_sizes: [[3, 3, 3], [3, 2, 3], [3, 3, 3]]\n");
  EXPECT_NE(e.find("model.kernel_sizes: stage 1 has [3, 2, 3]; kernels are odd"), std::string::npos) << e;
  e = error_of(base + "  strides: [[1, 1, 1], [2, 3, 2], [2, 2, 2]]\n");
  EXPECT_NE(e.find("model.strides: stage 1 has [2, 3, 2]; a stride is 1 or 2"), std::string::npos) << e;
  e = error_of(base + "  strides: [[2, 2, 2], [2, 2, 2], [2, 2, 2]]\n");
  EXPECT_NE(e.find("model.strides: stage 0 has [2, 2, 2]"), std::string::npos) << e;
  e = error_of(base + "  architecture: mlperf_unet3d\n  strides: [1, 2, 2]\n");
  EXPECT_NE(e.find("model.strides: applies to model.architecture unet and resenc_unet only"), std::string::npos) << e;
  // The patch against the strides' product per axis.
  e = error_of(
      "data: {path: d.h5, patch_size: [5, 32, 32]}\nmodel:\n  levels: 3\n"
      "  strides: [[1, 1, 1], [1, 2, 2], [2, 2, 2]]\n");
  EXPECT_NE(e.find("data.patch_size: [5, 32, 32] must divide by [2, 4, 4]"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);  // one line
}

}  // namespace
}  // namespace u3d
