// model.head: sigmoid (core/output_head.h): K - 1 output channels, the bce and sigmoid dice terms
// (train/losses.h), labels at predict.threshold (predict/postprocess.h), probabilities averaged
// over windows and mirrorings (predict/predictor.h), and the config's checks.
#include <gtest/gtest.h>

#include <cmath>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/output_head.h"
#include "u3d/model/unet.h"
#include "u3d/predict/postprocess.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/losses.h"

namespace u3d {
namespace {

Config config_of(const std::string& model_and_training) {
  return load_config_from_string("data:\n  path: d.h5\n" + model_and_training, "exp.yaml");
}

// The ConfigError's message, "" when the config loads.
std::string head_error_of(const std::string& model_and_training) {
  std::string message;
  try {
    config_of(model_and_training);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  return message;
}

std::vector<int> as_vector(const torch::Tensor& labels) {
  const auto flat = labels.flatten().to(torch::kInt);
  return {flat.data_ptr<int>(), flat.data_ptr<int>() + flat.numel()};
}

double logit(double p) { return std::log(p / (1.0 - p)); }

TEST(SigmoidHead, ConfigTakesTheHeadAndBareLossNames) {
  const Config c = config_of("model:\n  head: sigmoid\ntraining:\n  loss: [bce, dice]\n");
  EXPECT_EQ(c.model.head, Head::kSigmoid);
  ASSERT_EQ(c.training.loss.terms.size(), 2u);
  EXPECT_EQ(c.training.loss.terms[0], (LossTerm{"bce", 1.0}));
  EXPECT_EQ(c.training.loss.terms[1], (LossTerm{"dice", 1.0}));
  EXPECT_TRUE(config_of("model:\n  head: sigmoid\ntraining:\n  loss: bce\n").training.loss == LossKind::kBce);
  EXPECT_EQ(Config{}.model.head, Head::kSoftmax);  // today's behaviour by default
  EXPECT_EQ(network_channels(Head::kSigmoid, 2), 1);
  EXPECT_EQ(network_channels(Head::kSigmoid, 4), 3);
  EXPECT_EQ(network_channels(Head::kSoftmax, 4), 4);
}

TEST(SigmoidHead, LossesThatDoNotFitTheHeadAreOneLineConfigErrors) {
  for (const std::string loss : {"dice_ce", "ce", "[ce, dice]", "[bce, cldice]", "[{name: boundary}]"}) {
    const std::string e = head_error_of("model:\n  head: sigmoid\ntraining:\n  loss: " + loss + "\n");
    EXPECT_NE(e.find("exp.yaml:"), std::string::npos) << loss << ": " << e;
    EXPECT_NE(e.find("training.loss: "), std::string::npos) << loss << ": " << e;
    EXPECT_NE(e.find("needs model.head softmax"), std::string::npos) << loss << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  for (const std::string loss : {"bce", "[bce, dice]"}) {
    const std::string e = head_error_of("training:\n  loss: " + loss + "\n");
    EXPECT_NE(e.find("needs model.head sigmoid"), std::string::npos) << loss << ": " << e;
  }
  EXPECT_NE(
      head_error_of("model:\n  head: sigmoid\ntraining:\n  class_weights: [1, 2]\n").find("training.class_weights"),
      std::string::npos);
  EXPECT_NE(head_error_of("model:\n  head: tanh\n").find("model.head"), std::string::npos);
  EXPECT_EQ(head_error_of("model:\n  head: sigmoid\ntraining:\n  loss: [dice]\n"), "");  // dice fits either head
}

TEST(SigmoidHead, AutoIsBceAndDiceAndARegressionDatasetIsRefused) {
  const LossSpec s = resolve_loss(LossSpec(LossKind::kAuto), Task::kSegmentation, false, Head::kSigmoid);
  ASSERT_TRUE(s.is_list());
  EXPECT_EQ(s.terms, (std::vector<LossTerm>{{"bce", 1.0}, {"dice", 1.0}}));
  EXPECT_TRUE(resolve_loss(LossSpec(LossKind::kAuto), Task::kSegmentation, false) == LossKind::kDiceCe);
  EXPECT_THROW(resolve_loss(LossSpec(LossKind::kAuto), Task::kDose, true, Head::kSigmoid), ConfigError);
  EXPECT_THROW(resolve_loss(LossSpec(LossKind::kBce), Task::kDose, true), ConfigError);
}

TEST(SigmoidHead, BceIsTheMeanBinaryCrossEntropyOfChannelKForLabelK) {
  torch::manual_seed(0);
  const auto logits = torch::randn({2, 2, 3, 4, 5});  // 3 classes
  const auto labels = torch::randint(0, 3, {2, 3, 4, 5}, torch::kLong);
  const auto p = torch::sigmoid(logits);
  const auto y = torch::stack({labels.eq(1), labels.eq(2)}, 1).to(torch::kFloat);
  const auto expected = -(y * p.log() + (1 - y) * (1 - p).log()).mean();
  EXPECT_NEAR(sigmoid_bce_loss(logits, labels).item<double>(), expected.item<double>(), 1e-5);
  // Voxels left out by `valid` count in neither the sum nor the mean.
  const auto valid = torch::rand({2, 3, 4, 5}).gt(0.3);
  const auto v = valid.unsqueeze(1).to(torch::kFloat);
  const auto masked = -((y * p.log() + (1 - y) * (1 - p).log()) * v).sum() / (v.sum() * 2);
  EXPECT_NEAR(sigmoid_bce_loss(logits, labels, valid).item<double>(), masked.item<double>(), 1e-5);
}

TEST(SigmoidHead, DiceUsesTheSigmoidProbabilitiesOfTheForegroundChannels) {
  torch::manual_seed(1);
  const auto labels = torch::randint(0, 2, {2, 4, 4, 4}, torch::kLong);
  const auto perfect = (labels.unsqueeze(1).to(torch::kFloat) * 2 - 1) * 30;  // (2, 1, ...) +-30
  EXPECT_NEAR(sigmoid_dice_loss(perfect, labels).item<double>(), 0.0, 1e-5);
  EXPECT_NEAR(sigmoid_dice_loss(-perfect, labels).item<double>(), 1.0, 1e-5);
  const auto logits = torch::randn({2, 1, 4, 4, 4});
  const auto p = torch::sigmoid(logits).squeeze(1);
  const auto y = labels.eq(1).to(torch::kFloat);
  const auto dice = (2 * (p * y).sum({1, 2, 3}) + 1e-5) / (p.sum({1, 2, 3}) + y.sum({1, 2, 3}) + 1e-5);
  EXPECT_NEAR(sigmoid_dice_loss(logits, labels).item<double>(), 1.0 - dice.mean().item<double>(), 1e-5);
  // The list form [bce, dice] with a sigmoid head: their sum, the dice term on sigmoid probabilities.
  LossSpec both;
  both.terms = {{"bce", 1.0}, {"dice", 1.0}};
  LossOptions o;
  o.sigmoid = true;
  const Loss loss(both, o);
  const LossParts parts = loss.parts(logits, labels, {});
  EXPECT_NEAR(parts.total.item<double>(),
              (sigmoid_bce_loss(logits, labels) + sigmoid_dice_loss(logits, labels)).item<double>(), 1e-6);
  EXPECT_EQ(loss.term_names(), (std::vector<std::string>{"bce", "dice"}));
  // Deep supervision: the same terms on each K - 1 channel output.
  const std::vector<torch::Tensor> outs = {logits, torch::randn({2, 1, 2, 2, 2})};
  EXPECT_TRUE(deep_supervision_loss(loss, outs, labels, {0.5, 0.5}).isfinite().item<bool>());
}

TEST(SigmoidHead, LabelsFollowTheThresholdExactly) {
  // One channel (binary): the probabilities of label 1 along W.
  const std::vector<double> p = {0.1, 0.29, 0.31, 0.5, 0.69, 0.71, 0.95};
  auto out = torch::zeros({1, 1, 1, static_cast<int64_t>(p.size())});
  for (size_t i = 0; i < p.size(); ++i) out[0][0][0][static_cast<int64_t>(i)] = logit(p[i]);
  const auto at = [&](double t) { return as_vector(labels_from_output(out, {t, 0, Head::kSigmoid})); };
  EXPECT_EQ(at(0.3), (std::vector<int>{0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(at(0.5), (std::vector<int>{0, 0, 0, 1, 1, 1, 1}));  // p = 0.5 (logit 0) is at the threshold
  EXPECT_EQ(at(0.7), (std::vector<int>{0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(at(0.0), at(0.5));  // 0: the default 0.5
  EXPECT_EQ(labels_from_output(out, {0.5, 0, Head::kSigmoid}).scalar_type(), torch::kUInt8);
  // Two channels (labels 1, 2): the most probable channel at or above the threshold wins.
  auto two = torch::zeros({2, 1, 1, 4});
  const double a[4][2] = {{0.2, 0.4}, {0.6, 0.4}, {0.6, 0.8}, {0.9, 0.55}};
  for (int64_t i = 0; i < 4; ++i) {
    two[0][0][0][i] = logit(a[i][0]);
    two[1][0][0][i] = logit(a[i][1]);
  }
  EXPECT_EQ(as_vector(labels_from_output(two, {0.5, 0, Head::kSigmoid})), (std::vector<int>{0, 1, 2, 1}));
  EXPECT_EQ(as_vector(labels_from_output(two, {0.3, 0, Head::kSigmoid})), (std::vector<int>{2, 1, 2, 1}));
  // Channels on dim 1 (a batch, as validation's pseudo-Dice reads it).
  EXPECT_EQ(as_vector(labels_from_output(two.unsqueeze(0), {0.5, 0, Head::kSigmoid}, /*dim=*/1)),
            (std::vector<int>{0, 1, 2, 1}));
  // The softmax head is unchanged: the argmax.
  EXPECT_TRUE(torch::equal(labels_from_output(two, PostprocessOptions{}), two.argmax(0).to(torch::kUInt8)));
  // A threshold with more than 2 classes is a sigmoid head's normal use.
  EXPECT_NO_THROW(check_postprocess({0.4, 0, Head::kSigmoid}, Task::kSegmentation, 3));
  EXPECT_THROW(check_postprocess({0.4, 0, Head::kSoftmax}, Task::kSegmentation, 3), ConfigError);
}

TEST(SigmoidHead, WindowsAndMirroringsAverageProbabilities) {
  torch::manual_seed(3);
  ModelConfig m = test::unet_config(2);
  m.head = Head::kSigmoid;
  auto net = build_network(m, 1, network_channels(m.head, 2));
  net->eval();
  torch::NoGradGuard no_grad;
  const auto image = torch::randn({1, 8, 8, 8});  // one window
  SlidingWindowOptions o = test::window({8, 8, 8}, 8, /*mirror=*/true);
  o.gaussian = false;
  o.sigmoid = true;
  const auto out = sliding_window_predict(*net, image, o, torch::kCPU);  // (1, 8, 8, 8)
  torch::Tensor mean;
  for (const auto& dims : mirror_combinations({8, 8, 8})) {
    const auto x = dims.empty() ? image.unsqueeze(0) : torch::flip(image.unsqueeze(0), dims);
    auto p = torch::sigmoid(net->forward(x));
    if (!dims.empty()) p = torch::flip(p, dims);
    mean = mean.defined() ? mean + p : p;
  }
  mean = mean[0] / 8.0;
  EXPECT_EQ(out.sizes(), (torch::IntArrayRef{1, 8, 8, 8}));
  EXPECT_TRUE(torch::allclose(torch::sigmoid(out), mean, 1e-5, 1e-5));
  // The mean of the logits would differ: the probabilities are what is averaged.
  o.sigmoid = false;
  const auto logits_mean = sliding_window_predict(*net, image, o, torch::kCPU);
  EXPECT_FALSE(torch::allclose(torch::sigmoid(logits_mean), mean, 1e-6, 1e-6));
}

}  // namespace
}  // namespace u3d
