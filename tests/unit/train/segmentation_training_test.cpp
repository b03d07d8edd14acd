// The nnU-Net-like recipe's parts: deep supervision (heads, weights, target down-sampling, loss),
// the streaming sliding window, resampling of a slab stream, CT normalisation and the config keys.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/data/preprocess.h"
#include "u3d/model/unet.h"
#include "u3d/predict/prediction_output.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

ModelConfig small_model(bool deep) {
  ModelConfig m = test::unet_config(4);
  m.deep_supervision = deep;
  return m;
}

TEST(DeepSupervision, OneOutputPerDecoderStageFinestFirst) {
  torch::manual_seed(0);
  auto net = build_network(small_model(true), 2, 3);
  const auto x = torch::randn({1, 2, 8, 16, 24});
  const auto outs = net->forward_deep(x);
  ASSERT_EQ(outs.size(), 3u);  // levels - 1, as nnU-Net
  EXPECT_EQ(outs[0].sizes(), (torch::IntArrayRef{1, 3, 8, 16, 24}));
  EXPECT_EQ(outs[1].sizes(), (torch::IntArrayRef{1, 3, 4, 8, 12}));
  EXPECT_EQ(outs[2].sizes(), (torch::IntArrayRef{1, 3, 2, 4, 6}));
  // forward() (prediction) is the full-resolution output alone.
  net->eval();
  EXPECT_TRUE(torch::allclose(net->forward(x), net->forward_deep(x)[0]));
  // Without the switch: no extra parameters and a single output.
  auto plain = build_network(small_model(false), 2, 3);
  EXPECT_EQ(plain->forward_deep(x).size(), 1u);
  EXPECT_EQ(count_parameters(*net) - count_parameters(*plain),
            (8 * 3 + 3) + (16 * 3 + 3));  // 1x1x1 heads at levels 1, 2
}

TEST(DeepSupervision, WeightsHalveWithTheLowestOffAndSumToOne) {
  const auto w = deep_supervision_weights(4);  // 1, 1/2, 1/4, 0 -> / 1.75
  ASSERT_EQ(w.size(), 4u);
  EXPECT_DOUBLE_EQ(w[0], 1 / 1.75);
  EXPECT_DOUBLE_EQ(w[1], 0.5 / 1.75);
  EXPECT_DOUBLE_EQ(w[2], 0.25 / 1.75);
  EXPECT_DOUBLE_EQ(w[3], 0.0);
  EXPECT_EQ(deep_supervision_weights(1), (std::vector<double>{1.0}));
}

TEST(DeepSupervision, LabelsDownsampledByNearestNeighbourAsNnunet) {
  const auto labels = torch::arange(2 * 4 * 4 * 8, torch::kLong).reshape({2, 4, 4, 8});
  const auto half = downsample_labels(labels, {2, 2, 2});
  EXPECT_EQ(half.sizes(), (torch::IntArrayRef{2, 2, 2, 4}));
  EXPECT_EQ(half[1][1][0][3].item<int64_t>(), labels[1][3][1][7].item<int64_t>());  // 2 o + 1
  const auto quarter = downsample_labels(labels, {4, 4, 4});
  EXPECT_EQ(quarter.sizes(), (torch::IntArrayRef{2, 1, 1, 2}));
  EXPECT_EQ(quarter[0][0][0][1].item<int64_t>(), labels[0][2][2][6].item<int64_t>());  // 4 o + 2
  // Same as F.interpolate(mode = nearest-exact) on the labels.
  namespace F = torch::nn::functional;
  const auto ref =
      F::interpolate(labels.to(torch::kFloat).unsqueeze(1),
                     F::InterpolateFuncOptions().size(std::vector<int64_t>{2, 2, 4}).mode(torch::kNearestExact))
          .squeeze(1)
          .to(torch::kLong);
  EXPECT_TRUE(torch::equal(half, ref));
}

TEST(DeepSupervision, LossIsTheWeightedSumOverResolutions) {
  torch::manual_seed(1);
  const std::vector<torch::Tensor> outs = {torch::randn({2, 3, 8, 8, 8}), torch::randn({2, 3, 4, 4, 4}),
                                           torch::randn({2, 3, 2, 2, 2})};
  const auto labels = torch::randint(0, 3, {2, 8, 8, 8}, torch::kLong);
  const Loss loss(LossKind::kDiceCe);
  const auto w = deep_supervision_weights(3);  // 2/3, 1/3, 0
  const auto total = deep_supervision_loss(loss, outs, labels, w);
  const auto expected =
      loss(outs[0], labels, {}) * w[0] + loss(outs[1], downsample_labels(labels, {2, 2, 2}), {}) * w[1];
  EXPECT_NEAR(total.item<double>(), expected.item<double>(), 1e-6);
}

// A sink that records the slabs it is handed.
class RecordingSink : public SlabSink {
 public:
  void consume(int64_t d0, const torch::Tensor& slab) override {
    starts.push_back(d0);
    slabs.push_back(slab.clone());
  }
  std::vector<int64_t> starts;
  std::vector<torch::Tensor> slabs;
};

// The straightforward whole-volume computation the streaming version must reproduce.
torch::Tensor reference_blend(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& o) {
  torch::NoGradGuard no_grad;
  const auto zs = window_starts(image.size(1), o.patch[0], o.overlap);
  const auto ys = window_starts(image.size(2), o.patch[1], o.overlap);
  const auto xs = window_starts(image.size(3), o.patch[2], o.overlap);
  const auto g = gaussian_importance_map(o.patch);
  torch::Tensor sum, norm = torch::zeros({image.size(1), image.size(2), image.size(3)});
  for (auto z : zs)
    for (auto y : ys)
      for (auto x : xs) {
        const auto w = image.slice(1, z, z + o.patch[0]).slice(2, y, y + o.patch[1]).slice(3, x, x + o.patch[2]);
        const auto out = net.forward(w.unsqueeze(0))[0];
        if (!sum.defined()) sum = torch::zeros({out.size(0), image.size(1), image.size(2), image.size(3)});
        sum.slice(1, z, z + o.patch[0]).slice(2, y, y + o.patch[1]).slice(3, x, x + o.patch[2]).add_(out * g);
        norm.slice(0, z, z + o.patch[0]).slice(1, y, y + o.patch[1]).slice(2, x, x + o.patch[2]).add_(g);
      }
  return sum / norm;
}

TEST(StreamingPrediction, SlabsInOrderEqualTheWholeVolumeBlend) {
  torch::manual_seed(2);
  ModelConfig m = small_model(false);
  m.levels = 2;
  auto net = build_network(m, 1, 3);
  net->eval();
  const auto image = torch::randn({1, 29, 12, 10});  // 7 x 2 x 2 windows
  for (int64_t batch : {1, 3, 5}) {
    SlidingWindowOptions o = test::window({8, 8, 8}, batch);
    o.overlap = 0.5;
    RecordingSink sink;
    sliding_window_predict(*net, image, o, torch::kCPU, sink);
    int64_t next = 0;
    for (size_t i = 0; i < sink.starts.size(); ++i) {
      EXPECT_EQ(sink.starts[i], next);  // contiguous, in order, no overlap
      next += sink.slabs[i].size(1);
      // Rows are handed out as soon as no later window touches them: never more than a patch depth
      // at once here (a batch spans at most two window rows of D starts).
      EXPECT_LE(sink.slabs[i].size(1), o.patch[0]);
    }
    EXPECT_EQ(next, 29);
    EXPECT_GT(sink.slabs.size(), 2u) << "batch " << batch;  // really streamed
    const auto streamed = torch::cat(sink.slabs, 1);
    EXPECT_TRUE(torch::allclose(streamed, reference_blend(*net, image, o), 1e-5, 1e-5)) << "batch " << batch;
  }
}

TEST(StreamingPrediction, ResamplingSinkEqualsTrilinearInterpolation) {
  torch::manual_seed(4);
  const auto volume = torch::randn({2, 11, 9, 7});  // (K, D, H, W)
  for (const Shape3& out : {Shape3{23, 5, 14}, Shape3{6, 9, 7}, Shape3{11, 18, 3}}) {
    RecordingSink down;
    ResamplingSink sink({11, 9, 7}, out, down);
    for (int64_t d0 = 0; d0 < 11; d0 += 3) sink.consume(d0, volume.slice(1, d0, std::min<int64_t>(11, d0 + 3)));
    sink.finish();
    namespace F = torch::nn::functional;
    const auto ref = F::interpolate(volume.unsqueeze(0), F::InterpolateFuncOptions()
                                                             .size(std::vector<int64_t>{out[0], out[1], out[2]})
                                                             .mode(torch::kTrilinear)
                                                             .align_corners(false))[0];
    const auto got = torch::cat(down.slabs, 1);
    EXPECT_EQ(got.sizes(), ref.sizes());
    EXPECT_TRUE(torch::allclose(got, ref, 1e-5, 1e-5));
  }
}

TEST(Normalisation, CtSpecClipsThenStandardises) {
  const ChannelNorm n = parse_channel_norm("ct:-100:200:50:25");
  EXPECT_EQ(n.kind, ChannelNorm::Kind::kCt);
  DataConfig data;
  data.normalize = {"ct:-100:200:50:25"};
  DatasetInfo info;
  info.channel_names = {"ct"};
  const Preprocessor pre(data, info);
  const auto raw = torch::tensor({-1000.0f, 50.0f, 100.0f, 3000.0f}).reshape({1, 1, 1, 4});
  const auto x = pre.image(raw);
  EXPECT_TRUE(torch::allclose(x.flatten(), torch::tensor({-6.0f, 0.0f, 2.0f, 6.0f})));
  // dataset: the file's spec; zscore when the file records none.
  data.normalize = {"dataset"};
  EXPECT_EQ(resolve_normalization(data, info), (std::vector<std::string>{"zscore"}));
  info.channel_normalization = {"ct:-100:200:50:25"};
  EXPECT_TRUE(torch::allclose(Preprocessor(data, info).image(raw), x));
  for (const char* bad : {"ct:1:0:0:1", "ct:0:1:0:0", "ct:0:1:2"}) {
    EXPECT_THROW(parse_channel_norm(bad), ConfigError) << bad;
    EXPECT_THROW(load_config_from_string(fmt::format("data:\n  path: x.h5\n  normalize: [\"{}\"]\n", bad), "t"),
                 ConfigError)
        << bad;
  }
}

TEST(RecipeConfig, LoadsAndRefusesPseudoDiceWithoutPatches) {
  const Config cfg = load_config(test::source_dir() / "configs" / "segmentation_nnunet_like.yaml");
  EXPECT_TRUE(cfg.model.deep_supervision);
  EXPECT_EQ(cfg.checkpoint.monitor, Monitor::kPseudoDiceEma);
  EXPECT_EQ(cfg.training.optimizer, OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(cfg.training.momentum, 0.99);
  EXPECT_DOUBLE_EQ(cfg.data.foreground_fraction, 0.33);
  EXPECT_EQ(cfg.predict.tta, Tta::kFlips);
  EXPECT_EQ(cfg.model.base_filters, 32);
  EXPECT_EQ(cfg.model.max_filters, 320);
  try {
    load_config(test::source_dir() / "configs" / "segmentation_nnunet_like.yaml", {"training.val_patch_batches=0"});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint.monitor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace u3d
