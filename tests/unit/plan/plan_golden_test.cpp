// The whole plan against nnU-Net's (tests/data/nnunet_plans: nnunetv2 2.6.2's planner on the phantoms
// of tests/python/nnunet_phantoms.py, 8 GB target): make_plan with --memory-model nnunet on nnU-Net's
// own fingerprint (each case's spacing and shape) gives, for every configuration nnU-Net wrote
// (2d, 3d_fullres, 3d_lowres), its target spacing, median shape, patch, batch, stages, strides and
// kernels, and keeps 3d_lowres exactly where nnU-Net does (Dataset904 only; Dataset902's search ends
// less than 2x smaller and is dropped). Dataset903's cases differ in slice spacing: it is planned as
// `trainer import --spacing` (what its plan's header asks for) leaves it, nnU-Net's compute_new_shape.
// The integration test PlanGoldenCli runs the same through `trainer import nnunet` and `trainer plan`.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "nnunet_golden.h"
#include "test_support.h"
#include "u3d/core/stats.h"
#include "u3d/plan/planner.h"

namespace u3d {
namespace {

using Json = nlohmann::json;

// nnU-Net's fingerprint as ours: cases (spacing, shape) in (z, y, x) = (D, H, W), one CT channel with
// nnU-Net's foreground statistics, 3 classes. `resample`: the cases at this spacing instead, with
// nnU-Net's compute_new_shape (round(shape x spacing / new spacing)).
DatasetFingerprint fingerprint_of(const std::string& name, const std::array<double, 3>* resample = nullptr) {
  const Json f = test::nnunet_golden(name, "fingerprint");
  DatasetFingerprint fp;
  fp.task = Task::kSegmentation;
  fp.channel_names = {"CT"};
  fp.num_classes = 3;
  fp.class_names = {"background", "organ", "tumour"};
  const Json& ch = f.at("foreground_intensity_properties_per_channel").at("0");
  ChannelFingerprint c;
  c.name = "CT";
  c.mean = ch.at("mean");
  c.std = ch.at("std");
  c.p00_5 = ch.at("percentile_00_5");
  c.p99_5 = ch.at("percentile_99_5");
  c.min = ch.at("min");
  c.max = ch.at("max");
  fp.channels.push_back(c);
  std::vector<double> med[2][3];
  for (size_t i = 0; i < f.at("spacings").size(); ++i) {
    CaseFingerprint cs;
    cs.id = fmt::format("case{}", i);
    for (int a = 0; a < 3; ++a) {
      cs.spacing[a] = f.at("spacings")[i][a];
      cs.shape[a] = f.at("shapes_after_crop")[i][a];
      if (resample) {
        cs.shape[a] =
            static_cast<int64_t>(std::nearbyint(static_cast<double>(cs.shape[a]) * cs.spacing[a] / (*resample)[a]));
        cs.spacing[a] = (*resample)[a];
      }
      med[0][a].push_back(static_cast<double>(cs.shape[a]));
      med[1][a].push_back(cs.spacing[a]);
    }
    fp.total_voxels += cs.shape[0] * cs.shape[1] * cs.shape[2];
    fp.cases.push_back(cs);
  }
  for (int a = 0; a < 3; ++a) {
    fp.median_shape[a] = std::llround(percentile(med[0][a], 50.0));
    fp.median_spacing[a] = percentile(med[1][a], 50.0);
  }
  fp.splits["train"] = static_cast<int64_t>(fp.cases.size());
  return fp;
}

// One configuration of ours against nnU-Net's.
void expect_configuration(const Plan& ours, const Json& theirs) {
  const bool two_d = theirs.at("patch_size").size() == 2;
  const int first = two_d ? 1 : 0;  // nnU-Net's 2d lists (y, x)
  for (int a = first; a < 3; ++a) {
    EXPECT_EQ(ours.patch[a], theirs.at("patch_size")[a - first].get<int64_t>()) << "patch axis " << a;
    EXPECT_NEAR(ours.target_spacing[a], theirs.at("spacing")[a - first].get<double>(), 1e-6) << "spacing axis " << a;
    EXPECT_LE(std::abs(static_cast<double>(ours.median_shape[a]) -
                       theirs.at("median_image_size_in_voxels")[a - first].get<double>()),
              0.5)
        << "median shape axis " << a;
  }
  if (two_d) EXPECT_EQ(ours.patch[0], 1);
  EXPECT_EQ(ours.batch, theirs.at("batch_size").get<int64_t>());
  const Json& arch = theirs.at("architecture").at("arch_kwargs");
  EXPECT_EQ(ours.levels, arch.at("n_stages").get<int64_t>());
  EXPECT_EQ(ours.strides, test::nnunet_triples(arch.at("strides"), two_d));
  EXPECT_EQ(ours.kernels, test::nnunet_triples(arch.at("kernel_sizes"), two_d));
  EXPECT_EQ(ours.max_filters, two_d ? 512 : 320);  // nnU-Net: 32 doubling, at most 512 (2d) or 320
  ASSERT_EQ(ours.normalize.size(), 1u);
  EXPECT_EQ(theirs.at("normalization_schemes")[0], "CTNormalization");
  EXPECT_EQ(ours.normalize[0].rfind("ct:", 0), 0u) << ours.normalize[0];
}

TEST(PlanGolden, NnUNetMemoryModelGivesNnUNetsWholePlan) {
  const std::array<double, 3> at_903 = {1.775, 0.800000011920929, 0.800000011920929};
  int configurations = 0;
  for (const char* name : {"Dataset901_Thick", "Dataset902_Iso", "Dataset903_Varying", "Dataset904_IsoLarge"}) {
    SCOPED_TRACE(name);
    const bool varying = std::string(name) == "Dataset903_Varying";
    const DatasetFingerprint fp = fingerprint_of(name, varying ? &at_903 : nullptr);
    PlanOptions o;
    o.memory_model = "nnunet";
    o.gpu_memory_gib = 8;
    const Plan plan = make_plan(fp, o);
    const Json plans = test::nnunet_golden(name, "plans");
    const Json& configs = plans.at("configurations");
    {
      SCOPED_TRACE("3d_fullres");
      expect_configuration(plan, configs.at("3d_fullres"));
      ++configurations;
    }
    ASSERT_TRUE(plan.plan_2d);
    {
      SCOPED_TRACE("2d");
      expect_configuration(*plan.plan_2d, configs.at("2d"));
      EXPECT_EQ(plan.plan_2d->slice_axis, 0);  // nnU-Net's transpose_forward [0, 1, 2]: z first
      ++configurations;
    }
    EXPECT_EQ(static_cast<bool>(plan.lowres_plan), configs.contains("3d_lowres"));
    if (plan.lowres_plan && configs.contains("3d_lowres")) {
      SCOPED_TRACE("3d_lowres");
      expect_configuration(*plan.lowres_plan, configs.at("3d_lowres"));
      EXPECT_EQ(configs.at("3d_lowres").at("next_stage"), "3d_cascade_fullres");
      ++configurations;
    }
  }
  EXPECT_EQ(configurations, 9);
}

// The default memory model (bytes within 85% of the budget) differs from nnU-Net's only in patch and
// batch, where its budget is real bytes: the spacing, the topology rule and the normalisation stay.
TEST(PlanGolden, BytesMemoryModelKeepsNnUNetsSpacingAndTopologyRule) {
  const DatasetFingerprint fp = fingerprint_of("Dataset901_Thick");
  PlanOptions o;
  o.gpu_memory_gib = 8;
  const Plan plan = make_plan(fp, o);
  const Json c = test::nnunet_golden("Dataset901_Thick", "plans").at("configurations").at("3d_fullres");
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(plan.target_spacing[a], c.at("spacing")[a].get<double>(), 1e-6);
  EXPECT_EQ(plan.patch, (Shape3{40, 192, 192}));  // here the same patch: 6.1 GiB estimated of 8 x 0.85
  EXPECT_EQ(plan.strides, test::nnunet_triples(c.at("architecture").at("arch_kwargs").at("strides"), false));
}

}  // namespace
}  // namespace u3d
