// Issue 37: `trainer plan` writes nnU-Net's 2d configuration beside 3d_fullres (in-plane patch from
// the median shape, in-plane topology with 1 on the slice axis, filters up to 512, batch from the
// memory model capped at 5% of the dataset's voxels) and says which configuration it prefers.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "expectations.h"
#include "fixtures.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/model/unet.h"
#include "u3d/plan/planner.h"

namespace u3d {
namespace {

using Triples = std::vector<Shape3>;

using test::contains;

Plan plan_for(const Shape3& shape, int64_t cases, const std::array<double, 3>& spacing, double gib = 8) {
  PlanOptions options;
  options.gpu_memory_gib = gib;
  return make_plan(test::synthetic_fingerprint(shape, std::vector(static_cast<size_t>(cases), spacing)), options);
}

// The thick-slice phantoms (3 x 0.8 x 0.8 mm, 39 x 164 x 163): slices across D, the in-plane
// patch 164 x 163 padded up to nnU-Net's divisor 32 (192 x 192, as nnU-Net's plan of the golden
// Dataset901_Thick), six stages of (1, 3, 3) kernels; batch capped by 5% of the dataset's voxels
// (nnU-Net: 17); 2d preferred (anisotropic).
TEST(Plan2d, AnisotropicPhantomsGetTheSliceBlockAndPrefer2d) {
  const Plan plan = plan_for({39, 164, 163}, 12, {3.0, 0.8, 0.8});
  ASSERT_NE(plan.plan_2d, nullptr);
  const Plan& two = *plan.plan_2d;
  EXPECT_EQ(two.configuration, "2d");
  EXPECT_EQ(two.dims, 2);
  EXPECT_EQ(two.slice_axis, 0);
  EXPECT_EQ(two.patch, (Shape3{1, 192, 192}));
  EXPECT_EQ(two.levels, 6);
  EXPECT_EQ(two.strides, (Triples{{1, 1, 1}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}}));
  EXPECT_EQ(two.kernels, Triples(6, Shape3{1, 3, 3}));
  EXPECT_EQ(two.max_filters, 512);
  // 5% of 12 x 39 x 164 x 163 voxels / (192 x 192) = 16.97, rounded: the cap, not the 8 GiB, limits it.
  EXPECT_EQ(two.batch, 17);
  EXPECT_TRUE(contains(two.reasons.at("data.batch_size"), "capped")) << two.reasons.at("data.batch_size");
  EXPECT_EQ(plan.preferred, "2d");
  EXPECT_TRUE(contains(plan.preferred_reason, "anisotropic")) << plan.preferred_reason;
  // The 3D plan is unchanged by the 2d one: nnU-Net's 40 x 192 x 192.
  EXPECT_EQ(plan.configuration, "3d_fullres");
  EXPECT_EQ(plan.patch, (Shape3{40, 192, 192}));
}

// Isotropic 64^3 cases: slices across D (nnU-Net's transpose keeps axis 0 first), 64 x 64 in plane,
// four halvings to 4 x 4 (five stages); 3d_fullres preferred.
TEST(Plan2d, IsotropicPhantomsPlanSlicesAcrossDAndPrefer3d) {
  const Plan plan = plan_for({64, 64, 64}, 6, {1.0, 1.0, 1.0});
  ASSERT_NE(plan.plan_2d, nullptr);
  const Plan& two = *plan.plan_2d;
  EXPECT_EQ(two.slice_axis, 0);
  EXPECT_EQ(two.patch, (Shape3{1, 64, 64}));
  EXPECT_EQ(two.levels, 5);
  EXPECT_EQ(two.strides, (Triples{{1, 1, 1}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}}));
  EXPECT_EQ(two.kernels, Triples(5, Shape3{1, 3, 3}));
  EXPECT_EQ(two.batch, 19);  // 5% of 6 x 64^3 / 64^2 = 19.2
  EXPECT_EQ(plan.preferred, "3d_fullres");
  EXPECT_FALSE(plan.anisotropic);
}

// The slice axis: the coarsest one (nnU-Net's transpose_forward), or the one a single voxel deep.
TEST(Plan2d, TheSliceAxisIsTheCoarseOrTheFlatOne) {
  const Plan coarse_w = plan_for({64, 64, 16}, 6, {1.0, 1.0, 4.0});
  ASSERT_NE(coarse_w.plan_2d, nullptr);
  EXPECT_EQ(coarse_w.plan_2d->slice_axis, 2);
  EXPECT_EQ(coarse_w.plan_2d->patch, (Shape3{64, 64, 1}));
  EXPECT_EQ(coarse_w.plan_2d->kernels.back(), (Shape3{3, 3, 1}));
  // 2-D images stored one voxel deep: slices across that axis; 2d preferred (nnU-Net plans only 2d).
  const Plan flat = plan_for({1, 128, 96}, 10, {1.0, 1.0, 1.0});
  ASSERT_NE(flat.plan_2d, nullptr);
  EXPECT_EQ(flat.plan_2d->slice_axis, 0);
  EXPECT_EQ(flat.plan_2d->patch, (Shape3{1, 128, 96}));
  EXPECT_EQ(flat.preferred, "2d");
  EXPECT_TRUE(contains(flat.preferred_reason, "one slice deep")) << flat.preferred_reason;
}

// A small budget shrinks the in-plane patch (the larger axis first), never the slice axis.
TEST(Plan2d, ASmallBudgetShrinksTheInPlanePatch) {
  const Plan plan = plan_for({8, 1024, 1024}, 4, {1.0, 1.0, 1.0}, 2);
  ASSERT_NE(plan.plan_2d, nullptr);
  const Plan& two = *plan.plan_2d;
  EXPECT_EQ(two.patch[0], 1);
  EXPECT_LT(two.patch[1] * two.patch[2], 1024 * 1024);
  EXPECT_LE(static_cast<double>(two.step_bytes), 0.85 * 2 * 1024 * 1024 * 1024);
  EXPECT_LE(two.levels, 8);  // model.levels' cap
}

// The 2d YAML loads as written, with data.patch_size [1, H, W], per-stage triples with 1 on the
// slice axis, 512 filters, the batch, model.dims 2 and data.slice_axis (live once this build knows
// them, a comment before), and its network builds; the 3D YAML names the 2d plan and the preference.
TEST(Plan2d, TheYamlLoadsAndBuildsTheSliceNetwork) {
  const DatasetFingerprint fp = test::synthetic_fingerprint({39, 164, 163}, std::vector(12, std::array{3.0, 0.8, 0.8}));
  PlanOptions options;
  options.gpu_memory_gib = 8;
  const Plan plan = make_plan(fp, options);
  ASSERT_NE(plan.plan_2d, nullptr);
  const std::string yaml = plan_yaml(*plan.plan_2d, fp, "data/thick.h5", "thick_2d");
  EXPECT_TRUE(contains(yaml, "(2d configuration, nnU-Net-like)")) << yaml;
  EXPECT_TRUE(contains(yaml, "Preferred configuration: 2d")) << yaml;
  const Config cfg = load_config_from_string(yaml, "thick_2d.yaml");
  EXPECT_EQ(cfg.data.patch_size, (Shape3{1, 192, 192}));
  EXPECT_EQ(cfg.data.batch_size, 17);
  EXPECT_EQ(cfg.model.max_filters, 512);
  EXPECT_EQ(cfg.model.levels, 6);
  EXPECT_EQ(cfg.model.kernel_sizes, plan.plan_2d->kernels);
  EXPECT_EQ(cfg.model.strides, plan.plan_2d->strides);
  // model.dims and data.slice_axis: live where this build knows the key, else a comment.
  for (const auto& [key, value] : {std::pair{"model.dims", "2"}, std::pair{"data.slice_axis", "0"}}) {
    const std::string leaf = std::string(key).substr(std::string(key).find('.') + 1);
    if (contains(yaml, fmt::format("  # {}: {}", leaf, value))) {
      EXPECT_THROW((void)get_value(Config{}, key), ConfigError) << key << " is known: it must be written live";
    } else {
      EXPECT_EQ(get_value(cfg, key), value) << yaml;
    }
  }
  ModelConfig small = cfg.model;
  small.base_filters = 4;
  small.max_filters = 16;
  const Network net = build_network(small, 1, 3);
  EXPECT_EQ(net->size_divisors(), (Shape3{1, 32, 32}));
  const std::string full = plan_yaml(plan, fp, "data/thick.h5", "thick");
  EXPECT_TRUE(contains(full, "also wrote a 2d plan (slices across axis 0, patch [1, 192, 192])")) << full;
  EXPECT_TRUE(contains(full, "Preferred configuration: 2d (anisotropic")) << full;
  EXPECT_TRUE(contains(full, "max_filters: 320")) << full;
}

}  // namespace
}  // namespace u3d
