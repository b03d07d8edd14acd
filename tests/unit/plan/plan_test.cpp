// trainer plan's library: the dataset fingerprint, the memory model and the planner.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <regex>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/stage_geometry.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/unet.h"
#include "u3d/plan/fingerprint.h"
#include "u3d/plan/memory_model.h"
#include "u3d/plan/planner.h"

namespace u3d {
namespace {

constexpr int64_t kD = 4, kH = 5, kW = 6, kV = kD * kH * kW;

// Three segmentation cases of 4 x 5 x 6 voxels: channel "mri" = 100 i + voxel index, channel "ptv" a 0/1
// mask; labels 1 on voxels 0..29, 2 on voxels 30..39, 0 elsewhere; spacing (1, 1, 1 + i).
void write_seg_dataset(const fs::path& path, double offset = 0, bool with_val = true) {
  DatasetInfo info = test::segmentation_info({"mri", "ptv"}, {"background", "liver", "tumour"});
  DatasetWriter writer(path, info);
  std::vector<std::string> ids;
  for (int64_t i = 0; i < 3; ++i) {
    CaseData c;
    c.id = fmt::format("case{}", i);
    const torch::Tensor mri = torch::arange(kV, torch::kFloat) + 100.0 * static_cast<double>(i) + offset;
    const torch::Tensor ptv = (torch::arange(kV) % 2 == 0).to(torch::kFloat);
    c.image = torch::stack({mri, ptv}).reshape({2, kD, kH, kW});
    torch::Tensor labels = torch::zeros({kV}, torch::kUInt8);
    labels.slice(0, 0, 30).fill_(1);
    labels.slice(0, 30, 40).fill_(2);
    c.target = labels.reshape({kD, kH, kW});
    c.spacing = {1.0, 1.0, 1.0 + static_cast<double>(i)};
    writer.write_case(c);
    ids.push_back(c.id);
  }
  writer.set_split("train", {"case0", "case1"});
  if (with_val) writer.set_split("val", {"case2"});
  writer.commit();
}

TEST(Fingerprint, StatisticsOfKnownCases) {
  test::TempDir dir;
  write_seg_dataset(dir / "seg.h5");
  DatasetReader reader(dir / "seg.h5");
  const DatasetFingerprint fp = compute_fingerprint(reader, reader.info().case_ids, /*threads=*/2);
  ASSERT_EQ(fp.cases.size(), 3u);
  EXPECT_EQ(fp.task, Task::kSegmentation);
  EXPECT_EQ(fp.median_shape, (Shape3{kD, kH, kW}));
  EXPECT_DOUBLE_EQ(fp.median_spacing[2], 2.0);
  EXPECT_DOUBLE_EQ(fp.cases[2].spacing[2], 3.0);
  // Foreground: labels > 0 = voxels 0..39 of each case (every one, each case with the same weight).
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i) {
    for (int v = 0; v < 40; ++v) expected.push_back(100.0 * i + v);
  }
  double mean = 0, var = 0;
  for (double x : expected) mean += x / static_cast<double>(expected.size());
  for (double x : expected) var += (x - mean) * (x - mean) / static_cast<double>(expected.size());
  ASSERT_EQ(fp.channels.size(), 2u);
  const auto& mri = fp.channels[0];
  EXPECT_EQ(mri.samples, 120);
  EXPECT_NEAR(mri.mean, 119.5, 1e-9);
  EXPECT_NEAR(mri.mean, mean, 1e-9);
  EXPECT_NEAR(mri.std, std::sqrt(var), 1e-6);
  // nnU-Net draws 1e8 / 3 voxels per case, so each of the 120 values stands for about 833,333 draws:
  // the 0.5 and 99.5 percentiles of that sample are the smallest and the largest value.
  EXPECT_DOUBLE_EQ(mri.p00_5, 0.0);
  EXPECT_DOUBLE_EQ(mri.p99_5, 239.0);
  EXPECT_DOUBLE_EQ(mri.min, 0.0);
  EXPECT_DOUBLE_EQ(mri.max, 200.0 + kV - 1);
  EXPECT_FALSE(mri.binary);
  EXPECT_TRUE(fp.channels[1].binary);
  ASSERT_EQ(fp.class_frequency.size(), 3u);
  EXPECT_NEAR(fp.class_frequency[0], 80.0 / kV, 1e-12);
  EXPECT_NEAR(fp.class_frequency[1], 30.0 / kV, 1e-12);
  EXPECT_NEAR(fp.class_frequency[2], 10.0 / kV, 1e-12);
  EXPECT_EQ(fp.smallest_structure_voxels, 10);
  EXPECT_EQ(fp.total_voxels, 3 * kV);
  EXPECT_EQ(fp.splits.at("val"), 1);
  const std::string table = fingerprint_table(fp);
  EXPECT_NE(table.find("median shape    4 x 5 x 6"), std::string::npos) << table;
  EXPECT_NE(table.find("(0/1 mask)"), std::string::npos) << table;
}

TEST(Fingerprint, DoseTargetRangeAndMaskShare) {
  test::TempDir dir;
  DatasetInfo info;
  info.task = Task::kDose;
  info.channel_names = {"ct"};
  {
    DatasetWriter writer(dir / "dose.h5", info);
    for (int64_t i = 0; i < 2; ++i) {
      CaseData c;
      c.id = fmt::format("pt{}", i);
      c.image = torch::full({1, kD, kH, kW}, -1000.0f);
      c.image.view({-1}).slice(0, 0, 60).fill_(40.0f + static_cast<float>(i));  // the masked half
      c.target = torch::zeros({kD, kH, kW});
      c.target.view({-1}).slice(0, 0, 10).fill_(70.0f + static_cast<float>(i));
      c.mask = torch::zeros({kD, kH, kW}, torch::kUInt8);
      c.mask.view({-1}).slice(0, 0, 60).fill_(1);
      writer.write_case(c);
    }
    writer.set_split("train", {"pt0", "pt1"});
    writer.commit();
  }
  DatasetReader reader(dir / "dose.h5");
  const DatasetFingerprint fp = compute_fingerprint(reader, reader.info().case_ids, 1);
  EXPECT_DOUBLE_EQ(fp.target_min, 0.0);
  EXPECT_DOUBLE_EQ(fp.target_max, 71.0);
  EXPECT_NEAR(fp.mask_share, 0.5, 1e-12);
  EXPECT_NEAR(fp.channels[0].mean, 40.5, 1e-9);  // foreground = the mask: 40 and 41, 60 voxels each
  EXPECT_NEAR(fp.channels[0].std, 0.5, 1e-9);
  EXPECT_DOUBLE_EQ(fp.channels[0].min, -1000.0);

  const Plan plan = make_plan(fp, PlanOptions{});
  ASSERT_EQ(plan.normalize.size(), 1u);
  EXPECT_EQ(plan.normalize[0].rfind("ct:40:41:40.5:0.5", 0), 0u) << plan.normalize[0];  // named ct
  const Config cfg = load_config_from_string(plan_yaml(plan, fp, "dose.h5", "dose_plan"), "plan");
  EXPECT_EQ(cfg.training.loss, LossKind::kMaskedL1);
  EXPECT_EQ(cfg.data.val_split, "");
  EXPECT_EQ(cfg.model.output_activation, OutputActivation::kRelu);
}

TEST(Fingerprint, JsonRoundTrip) {
  test::TempDir dir;
  write_seg_dataset(dir / "seg.h5");
  DatasetReader reader(dir / "seg.h5");
  DatasetFingerprint fp = compute_fingerprint(reader, reader.info().case_ids, 1);
  fp.source_size = 1234;
  fp.source_mtime_ns = 1700000000123456789;
  const DatasetFingerprint back = fingerprint_from_json(to_json(fp), "test");
  EXPECT_EQ(to_json(back), to_json(fp));
  EXPECT_EQ(back.source_mtime_ns, fp.source_mtime_ns);
  EXPECT_DOUBLE_EQ(back.channels[0].std, fp.channels[0].std);
  EXPECT_THROW(fingerprint_from_json("{\"version\": 1}", "broken.json"), DataError);
}

TEST(Fingerprint, StoredBesideTheDatasetReusedAndRecomputedWhenItChanges) {
  test::TempDir dir;
  const fs::path data = dir / "seg.h5";
  write_seg_dataset(data);
  bool computed = false;
  {
    DatasetReader reader(data);
    const DatasetFingerprint first = load_or_compute_fingerprint(data, reader, 1, &computed);
    EXPECT_TRUE(computed);
    // The staleness key is Unix time in ns, as its header says (issue 39: it was file_clock's epoch).
    const auto now_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    EXPECT_NEAR(static_cast<double>(first.source_mtime_ns), static_cast<double>(now_ns), 600e9);
    ASSERT_TRUE(fs::exists(dir / "seg.h5.fingerprint.json"));
    const auto stamp = fs::last_write_time(dir / "seg.h5.fingerprint.json");
    const DatasetFingerprint second = load_or_compute_fingerprint(data, reader, 1, &computed);
    EXPECT_FALSE(computed);
    EXPECT_EQ(fs::last_write_time(dir / "seg.h5.fingerprint.json"), stamp);
    EXPECT_EQ(to_json(second), to_json(first));
  }
  fs::remove(data);
  write_seg_dataset(data, /*offset=*/1000.0);
  fs::last_write_time(data, fs::last_write_time(data) + std::chrono::seconds(5));
  DatasetReader reader(data);
  const DatasetFingerprint third = load_or_compute_fingerprint(data, reader, 1, &computed);
  EXPECT_TRUE(computed);
  EXPECT_NEAR(third.channels[0].mean, 1119.5, 1e-9);
}

// Issue 35: a segmentation dataset with an ignore label (2: unlabelled voxels, as the surface
// workflow) and an unlabelled test case (as an nnU-Net import with imagesTs) is fingerprinted and
// planned: ignored voxels are neither a class nor foreground, the unlabelled case adds its shape only.
TEST(Fingerprint, IgnoreLabelAndUnlabelledCasesArePlanned) {
  test::TempDir dir;
  DatasetInfo info = test::segmentation_info({"mri"}, {"background", "surface"});
  info.ignore_label = 2;
  {
    DatasetWriter writer(dir / "surface.h5", info);
    for (int64_t i = 0; i < 3; ++i) {
      CaseData c;
      c.id = fmt::format("case{}", i);
      c.image = (torch::arange(kV, torch::kFloat) + 1000.0 * static_cast<double>(i)).reshape({1, kD, kH, kW});
      if (i < 2) {  // case2: a test case without labels
        torch::Tensor labels = torch::zeros({kV}, torch::kUInt8);
        labels.slice(0, 0, 30).fill_(1);   // surface
        labels.slice(0, 30, 90).fill_(2);  // unlabelled (ignore), never foreground
        c.target = labels.reshape({kD, kH, kW});
      }
      writer.write_case(c);
    }
    writer.set_split("train", {"case0", "case1"});
    writer.set_split("test", {"case2"});
    writer.commit();
  }
  DatasetReader reader(dir / "surface.h5");
  const DatasetFingerprint fp = compute_fingerprint(reader, reader.info().case_ids, /*threads=*/2);
  EXPECT_EQ(fp.cases.size(), 3u);
  EXPECT_EQ(fp.unlabelled_cases, 1);
  EXPECT_EQ(fp.ignore_label, 2);
  EXPECT_NEAR(fp.ignored_share, 60.0 / kV, 1e-12);
  ASSERT_EQ(fp.class_frequency.size(), 2u);
  EXPECT_NEAR(fp.class_frequency[1], 30.0 / (kV - 60), 1e-12);  // of the voxels holding a class
  EXPECT_NEAR(fp.class_frequency[0] + fp.class_frequency[1], 1.0, 1e-12);
  EXPECT_EQ(fp.smallest_structure_voxels, 30);
  EXPECT_EQ(fp.total_voxels, 3 * kV);
  // The sample: the surface voxels 0..29 of case0 and case1 only (not the ignored ones, not case2).
  EXPECT_EQ(fp.channels[0].samples, 60);
  EXPECT_NEAR(fp.channels[0].mean, 514.5, 1e-9);
  EXPECT_DOUBLE_EQ(fp.channels[0].max, 2000.0 + kV - 1);  // min / max: every case
  const std::string table = fingerprint_table(fp);
  EXPECT_NE(table.find("ignore label    2"), std::string::npos) << table;
  EXPECT_NE(table.find("unlabelled      1 cases"), std::string::npos) << table;
  EXPECT_EQ(to_json(fingerprint_from_json(to_json(fp), "test")), to_json(fp));

  const Plan plan = make_plan(fp, PlanOptions{});
  EXPECT_EQ(plan.out_channels, 2);  // the ignore label is not a class
  const Config cfg = load_config_from_string(plan_yaml(plan, fp, "surface.h5", "surface"), "plan");
  EXPECT_EQ(cfg.predict.split, "test");
}

TEST(Fingerprint, LabelsOutsideTheClassesAndNoLabelledCaseAreRefusedByName) {
  test::TempDir dir;
  for (const bool all_unlabelled : {false, true}) {
    DatasetInfo info = test::segmentation_info({"mri"}, {"background", "surface"});
    info.ignore_label = 2;
    const fs::path path = dir / fmt::format("bad{}.h5", all_unlabelled);
    {
      DatasetWriter writer(path, info);
      CaseData c;
      c.id = "case0";
      c.image = torch::zeros({1, kD, kH, kW});
      if (!all_unlabelled) c.target = torch::full({kD, kH, kW}, 3, torch::kUInt8);  // above the ignore label
      writer.write_case(c);
      writer.set_split("train", {"case0"});
      writer.commit();
    }
    DatasetReader reader(path);
    try {
      compute_fingerprint(reader, reader.info().case_ids, 1);
      ADD_FAILURE() << "accepted " << path;
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(all_unlabelled ? "none of its 1 cases has labels"
                                         : "case 'case0': 'target' holds label values in [3, 3]"),
                std::string::npos)
          << what;
      if (!all_unlabelled) EXPECT_NE(what.find("and the ignore label 2"), std::string::npos) << what;
    }
  }
}

// A stored fingerprint that does not describe its dataset (edited by hand, copied from another file
// with the same size and time) is not used: recomputed, with a warning naming the field.
TEST(Fingerprint, TamperedStoredFingerprintIsRecomputed) {
  test::TempDir dir;
  const fs::path data = dir / "seg.h5";
  write_seg_dataset(data);
  DatasetReader reader(data);
  const DatasetFingerprint good = load_or_compute_fingerprint(data, reader, 1);
  const fs::path stored = fingerprint_path(data);
  const auto tamper = [&](const std::function<void(DatasetFingerprint&)>& edit, const std::string& field) {
    DatasetFingerprint fp = good;
    edit(fp);
    try {
      check_fingerprint(fp, reader, stored.string());
      ADD_FAILURE() << field << " accepted";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(stored.string() + ": " + field), std::string::npos) << e.what();
    }
    write_file_atomic(stored, to_json(fp));  // the same staleness key: only the content is wrong
    bool computed = false;
    const DatasetFingerprint back = load_or_compute_fingerprint(data, reader, 1, &computed);
    EXPECT_TRUE(computed) << field;
    EXPECT_EQ(to_json(back), to_json(good)) << field;
  };
  tamper([](DatasetFingerprint& fp) { fp.cases[0].shape = {0, kH, kW}; }, "cases[0].shape");
  tamper([](DatasetFingerprint& fp) { fp.cases[1].spacing[0] = -1e30; }, "cases[1].spacing");
  tamper([](DatasetFingerprint& fp) { fp.median_spacing[2] = -1e30; }, "median_shape");
  tamper([](DatasetFingerprint& fp) { fp.channels[0].std = -1; }, "channels[0]");
  tamper([](DatasetFingerprint& fp) { fp.channels[0].mean = std::nan(""); }, "channels[0].mean");
  tamper([](DatasetFingerprint& fp) { fp.class_frequency[1] = 7; }, "class_frequency[1]");
  tamper([](DatasetFingerprint& fp) { fp.num_classes = 5; }, "num_classes");
  tamper([](DatasetFingerprint& fp) { fp.cases.pop_back(); }, "cases");
  tamper([](DatasetFingerprint& fp) { fp.total_voxels = 0; }, "total_voxels");
  check_fingerprint(good, reader, stored.string());  // the true one passes
}

TEST(Planner, AnisotropicSpacingUsesThePercentileOnTheLowResolutionAxis) {
  std::vector<std::array<double, 3>> spacings;
  for (int i = 0; i < 10; ++i) spacings.push_back({2.5 + 0.5 * i, 0.8, 0.8});  // 2.5 .. 7.0 mm
  const DatasetFingerprint fp = test::synthetic_fingerprint({40, 256, 256}, spacings);
  const Plan plan = make_plan(fp, PlanOptions{});
  EXPECT_TRUE(plan.anisotropic);
  EXPECT_EQ(plan.lowres_axis, 0);
  std::vector<double> along;
  for (const auto& s : spacings) along.push_back(s[0]);
  EXPECT_DOUBLE_EQ(plan.target_spacing[0], percentile(along, 10.0));
  EXPECT_LT(plan.target_spacing[0], fp.median_spacing[0]);
  EXPECT_DOUBLE_EQ(plan.target_spacing[1], 0.8);
  EXPECT_TRUE(plan.resample_needed);
  // The reason names the median spacing (4.75 mm), not the percentile that replaced it.
  EXPECT_NE(plan.reasons.at("spacing").find("median spacing 4.75 > 3 x 0.8"), std::string::npos)
      << plan.reasons.at("spacing");

  const DatasetFingerprint iso = test::synthetic_fingerprint({64, 64, 64}, {{1, 1, 1}, {1.2, 1, 1}, {1.1, 1, 1}});
  EXPECT_FALSE(make_plan(iso, PlanOptions{}).anisotropic);
}

TEST(Planner, PatchFitsTheBudgetDividesAndYamlLoads) {
  const DatasetFingerprint fp = test::synthetic_fingerprint({256, 256, 256}, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}});
  PlanOptions options;
  options.gpu_memory_gib = 8;
  const Plan plan = make_plan(fp, options);
  ModelConfig m = test::unet_config(plan.levels, 32);
  m.strides = plan.strides;
  m.kernel_sizes = plan.kernels;
  const Shape3 d = patch_divisor(m);
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(plan.patch[a] % d[a], 0) << a;
    EXPECT_GE(plan.patch[a] / d[a], 4) << a;
    EXPECT_LE(plan.patch[a], 256);
  }
  EXPECT_LE(plan.levels, 8);
  EXPECT_GE(plan.batch, 2);
  EXPECT_LT(plan.patch[0] * plan.patch[1] * plan.patch[2], 256 * 256 * 256);  // 8 GiB cannot take the whole volume
  EXPECT_LE(static_cast<double>(plan.step_bytes), 0.85 * 8 * 1024.0 * 1024 * 1024);
  m.deep_supervision = true;
  EXPECT_EQ(plan.step_bytes, estimate_step_bytes(m, 1, 3, plan.patch, plan.batch, 2, 1, 6));
  // The search stops close to the budget: the next larger candidate did not fit.
  EXPECT_GT(static_cast<double>(plan.step_bytes), 0.6 * 0.85 * 8 * 1024.0 * 1024 * 1024);
  ASSERT_NE(plan.lowres_plan, nullptr);  // 8 GiB covers < 1/8 of 256^3
  EXPECT_GT(plan.lowres_plan->target_spacing[0], 1.0);

  const std::string yaml = plan_yaml(plan, fp, "data/big.h5", "big");
  const Config cfg = load_config_from_string(yaml, "plan.yaml");
  EXPECT_EQ(cfg.data.patch_size, plan.patch);
  EXPECT_EQ(cfg.data.batch_size, plan.batch);
  EXPECT_EQ(cfg.model.levels, plan.levels);
  EXPECT_EQ(cfg.model.strides, plan.strides);
  EXPECT_EQ(cfg.model.kernel_sizes, plan.kernels);
  EXPECT_EQ(cfg.data.val_split, "");  // no val split in this dataset
  EXPECT_EQ(cfg.data.normalize, plan.normalize);
  EXPECT_EQ(cfg.data.normalize[0], "ct:-900:1500:80:40");
  EXPECT_EQ(cfg.training.optimizer, OptimizerKind::kSgd);
  EXPECT_EQ(cfg.training.device, Device::kAuto);
  EXPECT_TRUE(cfg.model.deep_supervision);
  EXPECT_NE(yaml.find("patch_size: " + fmt::format("[{}, {}, {}]", plan.patch[0], plan.patch[1], plan.patch[2])),
            std::string::npos);
  EXPECT_NE(yaml.find("# largest that fits 8 GiB"), std::string::npos) << yaml;
  const std::string low = plan_yaml(*plan.lowres_plan, fp, "data/big.h5", "big_lowres");
  EXPECT_NE(low.find("--spacing"), std::string::npos);
  EXPECT_EQ(load_config_from_string(low, "low.yaml").data.path, "data/big_lowres.h5");
}

// The CT statistics are a sample's: written with six significant digits, never 15-digit floats.
TEST(Planner, YamlNumbersHaveSensibleDigits) {
  DatasetFingerprint fp = test::synthetic_fingerprint({64, 64, 64}, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}});
  fp.channels[0].mean = 63.29384712938471;
  fp.channels[0].std = 412.0123456789123;
  fp.channels[0].p00_5 = -1023.4999999999;
  fp.channels[0].p99_5 = 1523.123456789;
  const Plan plan = make_plan(fp, PlanOptions{});
  EXPECT_EQ(plan.normalize[0], "ct:-1023.5:1523.12:63.2938:412.012");
  const std::string yaml = plan_yaml(plan, fp, "data/ct.h5", "ct");
  EXPECT_FALSE(std::regex_search(yaml, std::regex("[0-9]\\.[0-9]{7,}"))) << yaml;
}

TEST(Planner, SmallDatasetKeepsTheWholeVolumeAndValSplit) {
  test::TempDir dir;
  write_seg_dataset(dir / "seg.h5");
  DatasetReader reader(dir / "seg.h5");
  const DatasetFingerprint fp = compute_fingerprint(reader, reader.info().case_ids, 1);
  PlanOptions options;
  options.gpu_memory_gib = 24;
  const Plan plan = make_plan(fp, options);
  EXPECT_EQ(plan.normalize, (std::vector<std::string>{"zscore", "none"}));
  EXPECT_EQ(plan.batch, 2);  // 5% of 360 voxels is less than two patches
  const Config cfg = load_config_from_string(plan_yaml(plan, fp, "seg.h5", "seg"), "plan");
  EXPECT_EQ(cfg.data.val_split, "val");
  EXPECT_EQ(cfg.checkpoint.monitor, Monitor::kPseudoDiceEma);
  PlanOptions dose;
  dose.task = "dose";
  EXPECT_THROW(make_plan(fp, dose), ConfigError);
}

// Issue 35: 2-D TIFFs imported as volumes one voxel deep get a patch one voxel deep; the YAML loads.
// Issue 39: the in-plane axes are still down-sampled (nnU-Net's topology pools an axis while it keeps
// >= 8 voxels), the one-voxel axis never; a patch exceeds the data only by the padding up to the
// divisor (nnU-Net's rule; the cache pads such cases).
TEST(Planner, VolumesOneVoxelDeepGetAPatchNoLargerThanTheData) {
  for (const Shape3& shape : {Shape3{1, 32, 32}, Shape3{3, 64, 64}, Shape3{5, 7, 200}}) {
    const DatasetFingerprint fp = test::synthetic_fingerprint(shape, {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}});
    const Plan plan = make_plan(fp, PlanOptions{});
    ModelConfig m = test::unet_config(plan.levels);
    m.strides = plan.strides;
    const Shape3 d = patch_divisor(m);
    for (int a = 0; a < 3; ++a) {
      EXPECT_LT(plan.patch[a], shape[a] + d[a]) << shape_text(plan.patch) << " for " << shape_text(shape);
      if (shape[a] == 1) EXPECT_EQ(plan.patch[a], 1);
      EXPECT_GE(plan.patch[a], 1);
      EXPECT_EQ(plan.patch[a] % d[a], 0) << a;
    }
    const Config cfg = load_config_from_string(plan_yaml(plan, fp, "flat.h5", "flat"), "plan");
    EXPECT_EQ(cfg.data.patch_size, plan.patch);
    if (shape[0] == 1) {
      EXPECT_EQ(plan.patch, (Shape3{1, 32, 32}));
      EXPECT_EQ(plan.levels, 4);  // 32 -> 16 -> 8 -> 4 in plane
      EXPECT_EQ(plan.strides, (std::vector<Shape3>{{1, 1, 1}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}}));
      EXPECT_NE(plan.reasons.at("model.levels").find("[1, 32, 32] -> [1, 4, 4] voxels at the bottleneck"),
                std::string::npos)
          << plan.reasons.at("model.levels");
    }
  }
}

TEST(MemoryModel, ParameterCountIsExact) {
  for (const bool residual : {false, true}) {
    ModelConfig m;
    m.architecture = residual ? Architecture::kResEncUNet : Architecture::kUNet;
    m.levels = 4;
    m.base_filters = 8;
    m.deep_supervision = true;
    const Network net = build_network(m, 2, 3);
    EXPECT_EQ(estimate_step_memory(m, 2, 3, {16, 16, 16}, 1, 4).parameters, count_parameters(*net)) << residual;
  }
}

TEST(MemoryModel, EstimateWithinToleranceOfTheCpuMeasurementOutsideTheCalibrationSet) {
  ModelConfig m = test::unet_config(4, 12);
  m.deep_supervision = true;
  const Shape3 patch = {48, 64, 32};
  const int64_t measured = measure_step_bytes_cpu(m, 1, 3, patch, 2);
  const int64_t estimated = estimate_step_bytes(m, 1, 3, patch, 2, /*activation_bytes=*/4, /*optimizer_states=*/0);
  const double error = static_cast<double>(estimated - measured) / static_cast<double>(measured);
  EXPECT_LT(std::abs(error), kEstimateTolerance) << "estimated " << estimated << ", measured " << measured;
  // Grows with the patch and the batch; halves (about) with bf16 activations.
  EXPECT_GT(estimate_step_bytes(m, 1, 3, {64, 64, 64}, 2, 4), estimate_step_bytes(m, 1, 3, patch, 2, 4));
  EXPECT_LT(estimate_step_bytes(m, 1, 3, patch, 2, 2), estimate_step_bytes(m, 1, 3, patch, 2, 4));
  EXPECT_THROW(estimate_step_bytes(m, 1, 3, {36, 64, 32}, 2, 4), ConfigError);  // 36 does not divide by 8
}

// plan --device cuda: besides out-of-memory errors, what cuDNN and cuBLAS say near a full GPU means
// "does not fit"; any other failure is a real error.
TEST(MemoryModel, CudnnAndCublasAllocationFailuresMeanDoesNotFit) {
  EXPECT_TRUE(step_does_not_fit(std::bad_alloc()));
  EXPECT_TRUE(step_does_not_fit(std::runtime_error(
      "cuDNN Frontend error: [cudnn_frontend] Error: No execution plans support the graph. unable to find an "
      "engine to execute this computation")));
  EXPECT_TRUE(step_does_not_fit(std::runtime_error("CUDNN_BACKEND_TENSOR_DESCRIPTOR: CUDNN_STATUS_ALLOC_FAILED")));
  EXPECT_TRUE(step_does_not_fit(
      std::runtime_error("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")));
  EXPECT_TRUE(step_does_not_fit(std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB")));
  EXPECT_FALSE(step_does_not_fit(std::runtime_error("Given groups=1, weight of size [8, 1, 3, 3, 3], expected input")));
  EXPECT_FALSE(step_does_not_fit(ConfigError("model.levels: 9 is outside [1, 8]")));
}

}  // namespace
}  // namespace u3d
