// plan/nnunet_vram.h against nnU-Net itself: the estimates below are what nnunetv2 2.6.2's
// get_network_from_plans(...).compute_conv_feature_map_size(patch) returned for the golden plans'
// architectures (tests/data/nnunet_plans, 1 input and 3 output channels), printed once with the
// helper venv of that README. Our count must give them exactly.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "nnunet_golden.h"
#include "test_support.h"
#include "u3d/plan/nnunet_vram.h"

namespace u3d {
namespace {

using Json = nlohmann::json;

TEST(NnUNetVram, FeatureMapCountIsNnUNets) {
  const std::map<std::string, double> expected = {{"Dataset901_Thick 2d", 11575296},
                                                  {"Dataset901_Thick 3d_fullres", 396449280},
                                                  {"Dataset902_Iso 2d", 32332800},
                                                  {"Dataset902_Iso 3d_fullres", 528522240},
                                                  {"Dataset903_Varying 2d", 11575296},
                                                  {"Dataset903_Varying 3d_fullres", 550544000},
                                                  {"Dataset904_IsoLarge 2d", 54319104},
                                                  {"Dataset904_IsoLarge 3d_lowres", 530668800},
                                                  {"Dataset904_IsoLarge 3d_fullres", 528522240}};
  int checked = 0;
  for (const auto& [key, want] : expected) {
    const std::string name = key.substr(0, key.find(' ')), config = key.substr(key.find(' ') + 1);
    const Json plans =
        Json::parse(test::read_text(test::source_dir() / "tests/data/nnunet_plans" / (name + ".plans.json")));
    const Json& c = plans.at("configurations").at(config);
    const Json& arch = c.at("architecture").at("arch_kwargs");
    const bool two_d = c.at("patch_size").size() == 2;
    Topology t;
    t.strides = test::nnunet_triples(arch.at("strides"), two_d);
    const Json& p = c.at("patch_size");
    const Shape3 patch = two_d ? Shape3{1, p.at(0), p.at(1)} : Shape3{p.at(0), p.at(1), p.at(2)};
    const FilterRange filters{32, two_d ? 512 : 320};
    EXPECT_EQ(nnunet_feature_map_elements(t, filters, /*out_ch=*/3, patch), want) << key;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

TEST(NnUNetVram, ReferenceScalesWithTheTarget) {
  EXPECT_DOUBLE_EQ(nnunet_reference(/*two_d=*/false, 8).elements, 560e6);
  EXPECT_EQ(nnunet_reference(/*two_d=*/false, 8).batch, 2);
  EXPECT_DOUBLE_EQ(nnunet_reference(/*two_d=*/true, 16).elements, 170e6);
  EXPECT_EQ(nnunet_reference(/*two_d=*/true, 16).batch, 12);
}

}  // namespace
}  // namespace u3d
