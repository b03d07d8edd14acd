// nnU-Net's own plans (tests/data/nnunet_plans: written by nnunetv2 2.6.2's planner on the phantoms of
// tests/python/nnunet_phantoms.py) against plan/topology.h: for every configuration nnU-Net wrote
// (2d, 3d_fullres, 3d_lowres), its spacing and patch give our stages, per-axis strides and kernels
// exactly, and the patch divides by the strides' product. 2d configurations are a slice axis of one
// voxel (as `trainer plan`'s 2d plan): stride 1 across it, nnU-Net's strides and kernels in plane.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "nnunet_golden.h"
#include "test_support.h"
#include "u3d/plan/topology.h"

namespace u3d {
namespace {

using Json = nlohmann::json;

TEST(TopologyGolden, EveryConfigurationNnUNetPlannedHasOurTopology) {
  int checked = 0;
  for (const char* name : {"Dataset901_Thick", "Dataset902_Iso", "Dataset903_Varying", "Dataset904_IsoLarge"}) {
    const Json plans = test::nnunet_golden(name, "plans");
    for (const auto& [config, c] : plans.at("configurations").items()) {
      if (!c.contains("patch_size")) continue;  // 3d_cascade_fullres: inherits 3d_fullres
      SCOPED_TRACE(fmt::format("{} {}", name, config));
      const bool two_d = c.at("patch_size").size() == 2;
      const Json& spacing = c.at("spacing");
      const Json& patch = c.at("patch_size");
      // 2d: a slice axis of one voxel whose spacing is never within 2x of the in-plane ones (as the
      // planner's 2d plan, plan/planner.cpp topology_for); nnU-Net plans the two in-plane axes.
      const std::array<double, 3> s = two_d ? std::array<double, 3>{1e9, spacing.at(0), spacing.at(1)}
                                            : std::array<double, 3>{spacing.at(0), spacing.at(1), spacing.at(2)};
      const Shape3 p = two_d ? Shape3{1, patch.at(0), patch.at(1)} : Shape3{patch.at(0), patch.at(1), patch.at(2)};
      const Json& arch = c.at("architecture").at("arch_kwargs");
      const Topology t = pool_and_conv_props(s, p);
      EXPECT_EQ(t.stages(), arch.at("n_stages").get<int64_t>());
      EXPECT_EQ(t.strides, test::nnunet_triples(arch.at("strides"), two_d));  // 2d: stride 1 across the slices
      std::vector<Shape3> kernels = t.kernels;
      if (two_d) {
        for (auto& k : kernels) k[0] = 1;  // the planner's 2d plan sets 1 across the slices
      }
      EXPECT_EQ(kernels, test::nnunet_triples(arch.at("kernel_sizes"), two_d));
      for (int a = 0; a < 3; ++a) EXPECT_EQ(p[a] % t.divisor[a], 0) << "axis " << a;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);  // 2d and 3d_fullres of four datasets, 3d_lowres of Dataset904_IsoLarge
}

}  // namespace
}  // namespace u3d
