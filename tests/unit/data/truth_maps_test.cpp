// Ground-truth maps made once per case in the cache (data/truth_maps.h): the signed Euclidean
// distance and the skeleton by hand, kept per case in the StackedCache, cropped by both samplers
// with the labels, read by the skeleton_recall and boundary terms, and down-sampled for deep
// supervision. The GPU cache's copy is checked in tests/gpu/elastic_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/cache.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/preprocess.h"
#include "u3d/data/sampler.h"
#include "u3d/data/truth_maps.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/train/losses.h"
#include "u3d/train/topology_losses.h"

namespace u3d {
namespace {

using torch::indexing::Slice;

// (N, K, ...) logits that put probability ~1 on each voxel's label.
torch::Tensor logits_for(const torch::Tensor& labels, int64_t k) {
  return torch::one_hot(labels, k).movedim(-1, 1).to(torch::kFloat) * 40.0 - 20.0;
}

TEST(TruthMaps, SignedDistanceByHand) {
  torch::Tensor labels = torch::zeros({7, 7, 7}, torch::kUInt8);
  labels[3][3][3] = 1;
  labels[0][0][0] = 2;  // the ignore label (K = 2): read as background
  const torch::Tensor d = signed_distance(labels, /*num_classes=*/2);
  ASSERT_EQ(d.sizes(), (std::vector<int64_t>{1, 7, 7, 7}));
  EXPECT_EQ(d.scalar_type(), torch::kFloat);
  EXPECT_FLOAT_EQ(d[0][3][3][3].item<float>(), -1.0f);  // inside, on the boundary
  EXPECT_FLOAT_EQ(d[0][3][3][4].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(d[0][3][4][4].item<float>(), static_cast<float>(std::sqrt(2.0)));
  EXPECT_FLOAT_EQ(d[0][4][4][4].item<float>(), static_cast<float>(std::sqrt(3.0)));
  EXPECT_FLOAT_EQ(d[0][3][3][6].item<float>(), 3.0f);
  EXPECT_FLOAT_EQ(d[0][0][0][0].item<float>(), static_cast<float>(std::sqrt(27.0)));  // ignore = outside

  // A slab 4 voxels thick: -1, -2, -2, -1 inside, +1 and +2 beside it.
  torch::Tensor slab = torch::zeros({8, 3, 3}, torch::kUInt8);
  slab.index_put_({Slice(2, 6)}, 1);
  const torch::Tensor s = signed_distance(slab, 2)[0].select(2, 1).select(1, 1);
  EXPECT_TRUE(torch::equal(s, torch::tensor({2.0f, 1.0f, -1.0f, -2.0f, -2.0f, -1.0f, 1.0f, 2.0f}))) << s;

  // Empty and full classes are capped; three classes give two channels.
  const torch::Tensor three = signed_distance(torch::ones({2, 2, 2}, torch::kUInt8), /*num_classes=*/3);
  ASSERT_EQ(three.size(0), 2);
  EXPECT_TRUE(torch::all(three[0] == -kDistanceCap).item<bool>());
  EXPECT_TRUE(torch::all(three[1] == kDistanceCap).item<bool>());
}

TEST(TruthMaps, SkeletonIsEachClassesSoftSkeleton) {
  torch::Tensor labels = torch::zeros({9, 9, 12}, torch::kUInt8);
  labels.index_put_({4, 4, Slice(1, 11)}, 1);                     // a line of class 1: its own skeleton
  labels.index_put_({Slice(0, 5), Slice(0, 3), Slice(0, 5)}, 2);  // a block of class 2
  labels.index_put_({8, 8, Slice(0, 12)}, 255);                   // the ignore label: background
  const torch::Tensor skel = label_skeleton(labels, /*num_classes=*/3, /*iterations=*/3);
  EXPECT_EQ(skel.scalar_type(), torch::kUInt8);
  const torch::Tensor line = skel.index({4, 4, Slice(1, 11)});
  EXPECT_TRUE(torch::all(line == 1).item<bool>());
  EXPECT_EQ((skel == 1).sum().item<int64_t>(), 10);
  EXPECT_EQ((skel == 255).sum().item<int64_t>(), 0);
  // Class 2's part equals the soft skeleton of its binary mask on the whole volume.
  const torch::Tensor block = labels.eq(2).to(torch::kFloat).view({1, 1, 9, 9, 12});
  const torch::Tensor expected = u3d::soft_skeleton(block, 3)[0][0] > 0.5;
  EXPECT_TRUE(torch::equal(skel == 2, expected));
  EXPECT_GT(expected.sum().item<int64_t>(), 0);
  EXPECT_LT(expected.sum().item<int64_t>(), labels.eq(2).sum().item<int64_t>());  // thinner than the block
}

// The skeleton is made on bool volumes (AND/OR for min/max): it must equal the soft skeleton of
// each class's 0/1 mask as float, on random masks of odd shapes (borders, axes of 1 and 2 voxels)
// and on a thin-sheet phantom, for 0 to 4 iterations.
TEST(TruthMaps, SkeletonOnBoolsEqualsTheFloatSoftSkeleton) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> volumes;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{7, 9, 11}, {1, 6, 5}, {2, 8, 3}, {12, 12, 12}}) {
    for (double share : {0.3, 0.7, 0.95}) volumes.push_back((torch::rand(shape) < share).to(torch::kUInt8));
  }
  torch::Tensor sheet = torch::zeros({16, 20, 20}, torch::kUInt8);
  sheet.index_put_({Slice(), Slice(8, 11), Slice()}, 1);     // a sheet 3 voxels thick
  sheet.index_put_({Slice(4, 9), Slice(), Slice(5, 7)}, 1);  // a second one across it
  volumes.push_back(sheet);
  for (size_t v = 0; v < volumes.size(); ++v) {
    const torch::Tensor& labels = volumes[v];
    const torch::Tensor mask = labels.to(torch::kFloat).view({1, 1, labels.size(0), labels.size(1), labels.size(2)});
    for (int64_t iterations = 0; iterations <= 4; ++iterations) {
      const torch::Tensor expected = u3d::soft_skeleton(mask, iterations)[0][0] > 0.5;
      EXPECT_TRUE(torch::equal(label_skeleton(labels, /*num_classes=*/2, iterations) == 1, expected))
          << "volume " << v << ", " << iterations << " iterations";
    }
  }
  EXPECT_THROW(label_skeleton(sheet, 2, -1), ConfigError);
}

TEST(TruthMaps, MadeOnlyForTheTermsThatReadThem) {
  Config cfg;
  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.num_classes = 3;
  cfg.training.loss = LossSpec();
  cfg.training.loss.terms = {{"ce", 1.0}, {"skeleton_recall", 1.0}};
  TruthMapOptions o = truth_map_options(cfg, info);
  EXPECT_TRUE(o.skeleton);
  EXPECT_FALSE(o.distance);
  EXPECT_EQ(o.num_classes, 3);
  cfg.training.loss.terms.push_back({"boundary", 0.1});
  EXPECT_TRUE(truth_map_options(cfg, info).distance);
  cfg.training.cache_truth_maps = false;
  o = truth_map_options(cfg, info);
  EXPECT_FALSE(o.skeleton || o.distance);
  EXPECT_FALSE(truth_map_maker(o));
  cfg.training.cache_truth_maps = true;
  cfg.training.loss = LossSpec(LossKind::kDiceCe);
  o = truth_map_options(cfg, info);
  EXPECT_FALSE(o.skeleton || o.distance);
}

// Four cases of two sizes, labels 0..2 in blobs and 255 (ignore), with their maps.
std::vector<CachedCase> labelled_cases() {
  torch::manual_seed(3);
  std::vector<CachedCase> out;
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t d = i % 2 ? 18 : 16;
    CachedCase c;
    c.id = "t" + std::to_string(i);
    c.image = torch::randn({1, d, 16, 20});
    namespace F = torch::nn::functional;
    const torch::Tensor smooth =
        F::avg_pool3d(torch::rand({1, 1, d, 16, 20}), F::AvgPool3dFuncOptions(5).stride(1).padding(2))[0][0];
    c.target = (smooth > 0.5).to(torch::kUInt8) + (smooth > 0.56).to(torch::kUInt8);
    c.target.index_put_({Slice(0, 2)}, 255);
    out.push_back(c);
  }
  return out;
}

LabelMapFn both_maps() { return truth_map_maker({/*skeleton=*/true, /*distance=*/true, /*num_classes=*/3, 2}); }

TEST(TruthMaps, CacheKeepsThemPerCase) {
  const std::vector<CachedCase> cases = labelled_cases();
  const StackedCache plain = StackedCache::from_cases(cases);
  EXPECT_EQ(plain.skeleton(), nullptr);
  EXPECT_EQ(plain.distance(), nullptr);
  CacheOptions o;
  o.label_maps = both_maps();
  const StackedCache cache = StackedCache::from_cases(cases, o);
  ASSERT_NE(cache.skeleton(), nullptr);
  ASSERT_NE(cache.distance(), nullptr);
  EXPECT_EQ(cache.skeleton()->dtype, torch::kUInt8);
  EXPECT_EQ(cache.distance()->dtype, torch::kHalf);
  EXPECT_EQ(cache.distance()->channel_count(), 2);
  int64_t voxels = 0;
  for (int64_t i = 0; i < cache.size(); ++i) {
    const torch::Tensor labels = cases[static_cast<size_t>(i)].target;
    voxels += labels.numel();
    EXPECT_TRUE(torch::equal(cache.view(*cache.skeleton(), i)[0], label_skeleton(labels, 3, 2))) << i;
    EXPECT_TRUE(torch::equal(cache.view(*cache.distance(), i), signed_distance(labels, 3).to(torch::kHalf))) << i;
  }
  EXPECT_EQ(cache.bytes() - plain.bytes(), voxels * (1 + 2 * 2));
  EXPECT_NE(cache.describe().find("skeleton uint8, distance[2] float16"), std::string::npos) << cache.describe();
  // A failing map names the case.
  CacheOptions failing;
  failing.label_maps = [](const torch::Tensor&) -> LabelMaps { throw std::runtime_error("no memory"); };
  try {
    (void)StackedCache::from_cases(cases, failing);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("case 't0': ground-truth maps: no memory"), std::string::npos) << e.what();
  }
}

// A cache that does not fit says how much of it the maps are, and how to go without them.
TEST(TruthMaps, ACacheTooLargeNamesTheMapsShare) {
  test::TempDir dir;
  test::make_phantom(dir / "p.h5", Task::kSegmentation, 4, 12);
  const DatasetReader reader(dir / "p.h5");
  const Preprocessor pre(DataConfig{}, reader.info());
  CacheOptions o;
  o.label_maps = both_maps();
  o.limit_bytes = 999;
  try {
    (void)StackedCache::load(reader, reader.split("train"), pre, o);
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("training.cache_truth_maps: false (5 bytes a voxel of maps)"),
              std::string::npos)
        << e.what();
  }
}

SamplerOptions sampler_options(bool resample) {
  SamplerOptions o = test::flip_rot_sampler({8, 12, 12}, 3, 5);
  o.augment.rot90_plane = {1, 2};
  if (resample) {
    o.augment.affine_prob = 0.5;
    test::set_elastic(o, 0.7, 2.5, 3);
  }
  o.foreground_fraction = 0.5;
  o.foreground = "labels:1,2";
  return o;
}

TEST(TruthMaps, SamplersCropThemWithTheLabels) {
  CacheOptions co;
  co.label_maps = both_maps();
  const StackedCache cache = StackedCache::from_cases(labelled_cases(), co);
  for (const bool resample : {false, true}) {
    const PatchSampler host(cache, sampler_options(resample));
    DeviceSampler device(host);
    device.set_epoch(1, 6);
    for (int64_t step = 0; step < 6; ++step) {
      const RawBatch raw = host.raw_batch(1, step);
      ASSERT_TRUE(raw.skeleton.defined());
      ASSERT_TRUE(raw.distance.defined());
      EXPECT_EQ(raw.distance.size(1), 2);
      EXPECT_EQ(raw.distance.scalar_type(), resample ? torch::kFloat : torch::kHalf);
      const torch::Tensor labels = raw.target.to(torch::kLong);  // (N, 1, d, h, w)
      const torch::Tensor skel = raw.skeleton.to(torch::kLong);
      // Nearest neighbour at the same source voxel: a skeleton voxel of class k is a label k.
      EXPECT_TRUE(torch::all(skel.eq(0).logical_or(skel.eq(labels))).item<bool>()) << step;
      if (!resample) {  // exact copies: inside class k exactly where its distance is negative
        for (int64_t k = 1; k <= 2; ++k) {
          const torch::Tensor inside = raw.distance.select(1, k - 1).unsqueeze(1) < 0;
          EXPECT_TRUE(torch::equal(inside, labels.eq(k))) << step << " class " << k;
        }
      }
      const RawBatch on_device = device.raw_batch(step);
      EXPECT_TRUE(torch::equal(on_device.skeleton, raw.skeleton)) << step;
      EXPECT_TRUE(torch::allclose(on_device.distance, raw.distance, 0, 1e-3)) << step;
      // Finalised: the loss's layout.
      const Batch b = host.finalizer()(raw);
      EXPECT_EQ(b.maps.skeleton.sizes(), b.target.sizes());
      EXPECT_EQ(b.maps.distance.scalar_type(), torch::kFloat);
    }
  }
}

TEST(TruthMaps, LossTermsReadTheCachedMaps) {
  torch::Tensor labels = torch::zeros({1, 6, 6, 6}, torch::kLong);
  labels.index_put_({0, Slice(1, 5), Slice(1, 5), Slice(1, 5)}, 1);  // a 4^3 cube
  const torch::Tensor logits = logits_for(labels, 2);
  LossSpec spec;
  spec.terms = {{"skeleton_recall", 1.0}, {"boundary", 1.0}};
  LossOptions lo;
  lo.boundary_distance = 2;
  const Loss loss(spec, lo);
  EXPECT_TRUE(loss.uses_skeleton());
  EXPECT_TRUE(loss.uses_distance());

  TruthMaps maps;
  maps.skeleton = label_skeleton(labels[0].to(torch::kUInt8), 2, 3).unsqueeze(0);
  maps.distance = signed_distance(labels[0], 2).unsqueeze(0);
  const torch::Tensor cached = loss.parts(logits, labels, {}, maps).terms;
  const torch::Tensor per_batch = loss.parts(logits, labels, {}).terms;
  // Skeleton recall of the right answer is ~0 either way.
  EXPECT_NEAR(cached[0].item<double>(), 0.0, 1e-5);
  EXPECT_NEAR(per_batch[0].item<double>(), 0.0, 1e-5);
  // Boundary by hand: p = 1 on the cube's 64 voxels, sdf = max(-2, d) / 2 there: its 8 inner voxels
  // are 2 from the outside (-1), the 56 others 1 (-0.5); divided by the 216 voxels.
  EXPECT_NEAR(cached[1].item<double>(), (8 * -1.0 + 56 * -0.5) / 216.0, 1e-5);
  // A skeleton map that misses everything the prediction covers gives a recall of 0.
  TruthMaps wrong = maps;
  wrong.skeleton = torch::zeros_like(maps.skeleton);
  wrong.skeleton[0][0][0][0] = 1;  // background there
  EXPECT_NEAR(loss.parts(logits, labels, {}, wrong).terms[0].item<double>(), 1.0 - 1.0 / 2.0, 1e-5);
  // Predicting class 1 everywhere adds the 152 voxels around the cube: 96 beside a face (1 / 2),
  // 48 beside an edge (sqrt 2 / 2 Euclidean, 1 / 2 chessboard), 8 at a corner (sqrt 3 / 2, 1 / 2).
  const torch::Tensor everywhere = logits_for(torch::ones_like(labels), 2);
  const double inside = 8 * -1.0 + 56 * -0.5;
  EXPECT_NEAR(loss.parts(everywhere, labels, {}, maps).terms[1].item<double>(),
              (inside + (96 + 48 * std::sqrt(2.0) + 8 * std::sqrt(3.0)) / 2) / 216.0, 1e-5);
  EXPECT_NEAR(loss.parts(everywhere, labels, {}).terms[1].item<double>(), (inside + 152 / 2.0) / 216.0, 1e-5);
}

TEST(TruthMaps, DeepSupervisionDownsamplesThem) {
  TruthMaps maps;
  maps.skeleton = torch::zeros({1, 4, 4, 8}, torch::kUInt8);
  maps.skeleton.index_put_({0, 0, 0, Slice()}, 1);  // a line the nearest-neighbour slice would miss
  maps.distance = torch::arange(128, torch::kFloat).view({1, 1, 4, 4, 8});
  const TruthMaps half = downsample_maps(maps, {2, 2, 2});
  ASSERT_EQ(half.skeleton.sizes(), (std::vector<int64_t>{1, 2, 2, 4}));
  EXPECT_TRUE(torch::all(half.skeleton[0][0][0] == 1).item<bool>());
  EXPECT_EQ(half.skeleton.sum().item<int64_t>(), 4);
  // Distance: the voxel downsample_labels takes, in voxels of the output (/ 2).
  EXPECT_TRUE(torch::equal(half.distance, downsample_labels(maps.distance, {2, 2, 2}) / 2.0));
  const TruthMaps aniso = downsample_maps(maps, {1, 2, 2});
  EXPECT_TRUE(torch::allclose(aniso.distance, downsample_labels(maps.distance, {1, 2, 2}) / std::cbrt(4.0)));
  EXPECT_TRUE(torch::equal(downsample_maps(maps, {1, 1, 1}).distance, maps.distance));

  // deep_supervision_parts hands each output its down-sampled maps.
  torch::manual_seed(2);
  const torch::Tensor labels = torch::randint(0, 2, {1, 4, 4, 8});
  TruthMaps m;
  m.skeleton = label_skeleton(labels[0].to(torch::kUInt8), 2, 1).unsqueeze(0);
  m.distance = signed_distance(labels[0], 2).unsqueeze(0);
  LossSpec spec;
  spec.terms = {{"skeleton_recall", 1.0}, {"boundary", 0.5}};
  const Loss loss(spec);
  const std::vector<torch::Tensor> outs = {torch::randn({1, 2, 4, 4, 8}), torch::randn({1, 2, 2, 2, 4})};
  const std::vector<double> weights = {0.75, 0.25};
  const LossParts p = deep_supervision_parts(loss, outs, labels, weights, m);
  const torch::Tensor expected =
      loss.parts(outs[0], labels, {}, m).terms * 0.75 +
      loss.parts(outs[1], downsample_labels(labels, {2, 2, 2}), {}, downsample_maps(m, {2, 2, 2})).terms * 0.25;
  EXPECT_TRUE(torch::allclose(p.terms, expected, 1e-6, 1e-7));
}

}  // namespace
}  // namespace u3d
