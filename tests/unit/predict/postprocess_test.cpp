#include "u3d/predict/postprocess.h"
#include "fixtures.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/cache.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/predict/prediction_output.h"

namespace u3d {
namespace {

// 2-class logits (2, 1, 1, n) whose softmax gives class 1 the probabilities `p`.
torch::Tensor logits_for(const std::vector<double>& p) {
  auto out = torch::zeros({2, 1, 1, static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) out[1][0][0][static_cast<int64_t>(i)] = std::log(p[i] / (1.0 - p[i]));
  return out;
}

std::vector<int> as_vector(const torch::Tensor& labels) {
  const auto flat = labels.flatten().to(torch::kInt);
  return {flat.data_ptr<int>(), flat.data_ptr<int>() + flat.numel()};
}

// (8, 8, 8) labels: class 1 as one isolated voxel and a 5-voxel line crossing D = 4; class 2 as 2
// voxels touching at a corner (one 26-connected component) and 3 voxels along a diagonal.
torch::Tensor component_labels() {
  auto l = torch::zeros({8, 8, 8}, torch::kUInt8);
  l[1][1][1] = 1;                                  // 1 voxel
  for (int64_t z = 2; z < 7; ++z) l[z][5][5] = 1;  // 5 voxels, rows 2..6
  l[6][1][1] = 2;                                  // 2 voxels, corner-connected
  l[7][2][2] = 2;
  for (int64_t i = 0; i < 3; ++i) l[1 + i][6][1 + i] = 2;  // 3 voxels, edge-diagonal
  return l;
}

TEST(Postprocess, ThresholdLabelsClassOneByItsProbability) {
  const auto out = logits_for({0.1, 0.3, 0.45, 0.55, 0.7, 0.9});
  EXPECT_EQ(as_vector(labels_from_output(out, 0.5)), (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(as_vector(labels_from_output(out, 0.25)), (std::vector<int>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(as_vector(labels_from_output(out, 0.8)), (std::vector<int>{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(labels_from_output(out, 0.25).scalar_type(), torch::kUInt8);
  EXPECT_EQ(labels_from_output(out, 0.25).sizes(), (torch::IntArrayRef{1, 1, 6}));
}

TEST(Postprocess, SmallComponentsOfEachClassBecomeBackground) {
  const auto labels = component_labels();
  const auto kept = remove_small_components(labels, 3);
  auto expected = labels.clone();
  expected[1][1][1] = 0;  // the 1-voxel component of class 1
  expected[6][1][1] = 0;  // the 2-voxel component of class 2
  expected[7][2][2] = 0;
  EXPECT_TRUE(torch::equal(kept, expected));
  EXPECT_EQ(kept.eq(1).sum().item<int64_t>(), 5);
  EXPECT_EQ(kept.eq(2).sum().item<int64_t>(), 3);
  EXPECT_TRUE(torch::equal(remove_small_components(labels, 6), torch::zeros_like(labels)));
}

TEST(Postprocess, BothOffIsTheArgmax) {
  torch::manual_seed(0);
  const auto out = torch::randn({3, 6, 7, 8});
  const auto labels = labels_from_output(out, 0.0);
  EXPECT_TRUE(torch::equal(labels, out.argmax(0).to(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(remove_small_components(labels, 0), labels));
  const PostprocessOptions off;
  EXPECT_FALSE(off.needs_whole_volume());
}

TEST(Postprocess, ChecksRefuseWhatDoesNotFit) {
  EXPECT_NO_THROW(check_postprocess({0.3, 10}, Task::kSegmentation, 2));
  EXPECT_NO_THROW(check_postprocess({0.0, 10}, Task::kSegmentation, 4));
  EXPECT_THROW(check_postprocess({0.3, 0}, Task::kSegmentation, 4), ConfigError);
  EXPECT_THROW(check_postprocess({0.3, 0}, Task::kDose, 1), ConfigError);
  EXPECT_THROW(check_postprocess({0.0, 5}, Task::kDose, 1), ConfigError);
  EXPECT_NO_THROW(check_postprocess({}, Task::kDose, 1));
}

// The streamed output path: the written (kept) prediction and the case's Dice are those of the
// post-processed labels, with component removal across the slabs the output arrives in.
TEST(Postprocess, CaseOutputWritesAndScoresThePostprocessedLabels) {
  test::TempDir dir;
  DatasetInfo info = test::segmentation_info({"image"}, {"background", "fg"});
  const Preprocessor pre(DataConfig{}, info);
  auto truth = torch::zeros({8, 8, 8}, torch::kUInt8);
  for (int64_t z = 2; z < 7; ++z) truth[z][5][5] = 1;  // the 5-voxel line only
  CachedCase c;
  c.id = "case_000";
  c.image = torch::zeros({1, 8, 8, 8});
  c.target = truth;
  // Class 1 where component_labels() has class 1, with p = 0.6; elsewhere p = 0.4.
  const auto fg = component_labels().eq(1);
  const auto logit =
      torch::where(fg, torch::full({8, 8, 8}, std::log(1.5)), torch::full({8, 8, 8}, std::log(0.4 / 0.6)));
  const auto out = torch::stack({torch::zeros({8, 8, 8}), logit});  // (2, D, H, W)

  auto run = [&](PostprocessOptions post, std::optional<Shape3> nifti_shape = std::nullopt) {
    PredictionWriter writer(dir / "p.h5", info, "test", "none");
    CaseOutputOptions o = writer.begin(c);
    o.keep_prediction = true;
    o.postprocess = post;
    if (nifti_shape) {
      o.source_file = dir / "p.nii.gz";
      o.geometry = plain_geometry(*nifti_shape, {1.0, 1.0, 1.0});
    }
    CaseOutputSink sink(c, pre, o, 0.0);
    sink.consume(0, out.narrow(1, 0, 4));
    sink.consume(4, out.narrow(1, 4, 4));
    return sink.finish();
  };
  const CaseScore plain = run({});
  EXPECT_TRUE(torch::equal(plain.prediction, fg.to(torch::kUInt8)));
  EXPECT_NEAR(plain.value, 2.0 * 5 / (6 + 5), 1e-9);
  const CaseScore cleaned = run({0.0, 3});
  EXPECT_TRUE(torch::equal(cleaned.prediction, truth));
  EXPECT_DOUBLE_EQ(cleaned.value, 1.0);
  const CaseScore strict = run({0.7, 0});  // p = 0.6 is below: nothing is foreground
  EXPECT_EQ(strict.prediction.sum().item<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(strict.value, 0.0);

  // NIfTI in the case's grid: the same labels as the predictions file.
  run({0.0, 3}, Shape3{8, 8, 8});
  EXPECT_TRUE(torch::equal(read_nifti(dir / "p.nii.gz").data, truth));
  // NIfTI in a grid twice as deep (resampled logits): components are counted there. The isolated
  // voxel becomes 2 voxels (removed at 3), the line about 10 (kept).
  run({}, Shape3{16, 8, 8});
  EXPECT_EQ(read_nifti(dir / "p.nii.gz").data.select(1, 1).select(1, 1).sum().item<int64_t>(), 2);
  run({0.0, 3}, Shape3{16, 8, 8});
  const auto deep = read_nifti(dir / "p.nii.gz").data;
  EXPECT_EQ(deep.select(1, 1).select(1, 1).sum().item<int64_t>(), 0);
  EXPECT_GE(deep.select(1, 5).select(1, 5).sum().item<int64_t>(), 9);
  EXPECT_EQ(deep.sum().item<int64_t>(), deep.select(1, 5).select(1, 5).sum().item<int64_t>());
}

}  // namespace
}  // namespace u3d
