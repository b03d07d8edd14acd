// nnU-Net's network topology in the planner (issue 39): per-axis strides and kernels from the
// spacing, written into the plan YAML, and the memory model counting them exactly.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "fixtures.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/model/unet.h"
#include "u3d/plan/memory_model.h"
#include "u3d/plan/planner.h"
#include "u3d/plan/topology.h"

namespace u3d {
namespace {

using Triples = std::vector<Shape3>;

// nnU-Net 2.8.1's plan for the thick-slice phantoms (3 x 0.8 x 0.8 mm, median shape
// 39 x 164 x 163): 6 stages; strides (1,1,1) (1,2,2) (2,2,2) x3 (1,2,2); kernels (1,3,3) then 3^3.
TEST(Topology, ThickSliceDataAsNnUNetPlansIt) {
  const Topology t = pool_and_conv_props({3.0, 0.8, 0.8}, {39, 164, 163});
  EXPECT_EQ(t.strides, (Triples{{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {1, 2, 2}}));
  EXPECT_EQ(t.kernels, (Triples{{1, 3, 3}, {3, 3, 3}, {3, 3, 3}, {3, 3, 3}, {3, 3, 3}, {3, 3, 3}}));
  EXPECT_EQ(t.divisor, (Shape3{8, 32, 32}));  // nnU-Net pads 39 x 164 x 163 to 40 x 192 x 192 by it
}

TEST(Topology, IsotropicAndVeryThickSlices) {
  // Isotropic 128^3: five halvings of every axis (128 -> 4), 3^3 kernels: today's default net, deeper.
  const Topology iso = pool_and_conv_props({1, 1, 1}, {128, 128, 128});
  EXPECT_EQ(iso.stages(), 6);
  for (int64_t l = 1; l < iso.stages(); ++l) EXPECT_EQ(iso.strides[static_cast<size_t>(l)], (Shape3{2, 2, 2}));
  for (const Shape3& k : iso.kernels) EXPECT_EQ(k, (Shape3{3, 3, 3}));
  // 5 mm slices at 0.7 mm in plane: the slice axis waits until the in-plane spacing is within 2x.
  const Topology thick = pool_and_conv_props({5.0, 0.7, 0.7}, {24, 256, 256});
  EXPECT_EQ(thick.strides[1], (Shape3{1, 2, 2}));
  EXPECT_EQ(thick.strides[2], (Shape3{1, 2, 2}));
  EXPECT_EQ(thick.strides[3], (Shape3{2, 2, 2}));  // 5 / 2.8 < 2
  EXPECT_EQ(thick.kernels[0], (Shape3{1, 3, 3}));
  EXPECT_EQ(thick.kernels[2], (Shape3{3, 3, 3}));  // 5 / 2.8 < 2: caught up
  // A single axis left needs >= 12 voxels (3 x the 4-voxel minimum) to be halved again.
  const Topology flat = pool_and_conv_props({1, 1, 1}, {1, 4, 12});
  EXPECT_EQ(flat.strides, (Triples{{1, 1, 1}, {1, 1, 2}}));
}

TEST(Topology, ThePlanTakesItAndItsYamlBuildsTheNetwork) {
  PlanOptions options;
  options.gpu_memory_gib = 8;
  // The thick-slice phantoms: 12 cases of 39 x 164 x 163 at 3 x 0.8 x 0.8 mm.
  const DatasetFingerprint fp = test::synthetic_fingerprint({39, 164, 163}, std::vector(12, std::array{3.0, 0.8, 0.8}));
  const Plan plan = make_plan(fp, options);
  EXPECT_EQ(plan.levels, 6);
  EXPECT_EQ(plan.strides, (Triples{{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {1, 2, 2}}));
  EXPECT_EQ(plan.kernels[0], (Shape3{1, 3, 3}));
  // The median shape padded up to the divisor (8, 32, 32): nnU-Net's 40 x 192 x 192.
  EXPECT_EQ(plan.patch, (Shape3{40, 192, 192}));
  const std::string yaml = plan_yaml(plan, fp, "data/thick.h5", "thick");
  EXPECT_NE(yaml.find("kernel_sizes: [[1, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3]]"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("strides: [[1, 1, 1], [1, 2, 2], [2, 2, 2], [2, 2, 2], [2, 2, 2], [1, 2, 2]]"), std::string::npos)
      << yaml;
  const Config cfg = load_config_from_string(yaml, "thick.yaml");
  EXPECT_EQ(cfg.model.strides, plan.strides);
  EXPECT_EQ(cfg.model.kernel_sizes, plan.kernels);
  const Network net = build_network(cfg.model, 1, 2);
  EXPECT_EQ(net->size_divisors(), (Shape3{8, 32, 32}));
  // The bottleneck is nnU-Net's 5 x 6 x 6, not the old plans' 4 x 19 x 19 or 4 x 5 x 5.
  EXPECT_NE(plan.reasons.at("model.levels").find("[40, 192, 192] -> [5, 6, 6]"), std::string::npos)
      << plan.reasons.at("model.levels");
}

TEST(Topology, MemoryModelCountsAnisotropicNetworksExactly) {
  for (const bool residual : {false, true}) {
    ModelConfig m = test::unet_config(4, 8);
    m.architecture = residual ? Architecture::kResEncUNet : Architecture::kUNet;
    m.deep_supervision = true;
    m.kernel_sizes = {{1, 3, 3}, {1, 3, 3}, {3, 3, 3}, {3, 3, 3}};
    m.strides = {{1, 1, 1}, {1, 2, 2}, {2, 2, 2}, {1, 2, 2}};
    const Network net = build_network(m, 2, 3);
    EXPECT_EQ(estimate_step_memory(m, 2, 3, {4, 16, 16}, 1, 4).parameters, count_parameters(*net)) << residual;
    EXPECT_THROW(estimate_step_memory(m, 2, 3, {3, 16, 16}, 1, 4), ConfigError);  // 3 does not divide by 2
  }
}

}  // namespace
}  // namespace u3d
