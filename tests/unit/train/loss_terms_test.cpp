// training.loss as a list of weighted terms, the dataset's ignore label in the losses, and the
// per-term sums the step monitor keeps for metrics.csv (train/losses.h, train/step_monitor.h).
#include <gtest/gtest.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/train/losses.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/topology_losses.h"

namespace u3d {
namespace {

const char* kBase = "data:\n  path: d.h5\n";

Config with_loss(const std::string& loss_yaml) {
  return load_config_from_string(std::string(kBase) + "training:\n  loss: " + loss_yaml + "\n", "exp.yaml");
}

std::string error_of(const std::string& loss_yaml) {
  try {
    with_loss(loss_yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LossConfig, ListOfTermsParsesAndRoundTrips) {
  const Config c = with_loss("[{name: ce, weight: 1}, {name: cldice, weight: 0.5}, {name: skeleton_recall}]");
  ASSERT_TRUE(c.training.loss.is_list());
  ASSERT_EQ(c.training.loss.terms.size(), 3u);
  EXPECT_EQ(c.training.loss.terms[1].name, "cldice");
  EXPECT_DOUBLE_EQ(c.training.loss.terms[1].weight, 0.5);
  EXPECT_DOUBLE_EQ(c.training.loss.terms[2].weight, 1.0);  // the default weight
  const Config back = load_config_from_string(to_yaml(c), "round.yaml");
  EXPECT_EQ(back.training.loss.terms, c.training.loss.terms);
  // The named form is unchanged.
  EXPECT_TRUE(with_loss("dice_ce").training.loss == LossKind::kDiceCe);
  EXPECT_FALSE(c.training.loss == LossKind::kDiceCe);
}

TEST(LossConfig, BadListsNameTheProblem) {
  EXPECT_NE(error_of("[{name: clDice}]").find("'clDice' is not one of"), std::string::npos);
  EXPECT_NE(error_of("[{name: ce}, {name: ce}]").find("listed twice"), std::string::npos);
  EXPECT_NE(error_of("[{name: dice, weight: -1}]").find("weight -1"), std::string::npos);
  EXPECT_NE(error_of("[{name: dice, wieght: 1}]").find("unknown field 'wieght'"), std::string::npos);
  EXPECT_NE(error_of("[[dice]]").find("training.loss"), std::string::npos);  // a name or a {name, weight}
  EXPECT_NE(error_of("[]").find("empty list"), std::string::npos);
}

TEST(LossConfig, TermsMustFitTheTask) {
  LossSpec seg;
  seg.terms = {{"ce", 1.0}, {"cldice", 0.5}};
  EXPECT_NO_THROW(resolve_loss(seg, Task::kSegmentation, false));
  EXPECT_THROW(resolve_loss(seg, Task::kDose, true), ConfigError);
  LossSpec dose;
  dose.terms = {{"masked_l1", 1.0}, {"mse", 0.1}};
  EXPECT_NO_THROW(resolve_loss(dose, Task::kDose, true));
  EXPECT_THROW(resolve_loss(dose, Task::kDose, /*has_mask=*/false), ConfigError);
  EXPECT_THROW(resolve_loss(dose, Task::kSegmentation, true), ConfigError);
}

TEST(LossConfig, ClassWeightsMustMatchTheClasses) {
  TrainingConfig t;
  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.num_classes = 2;
  info.class_names = {"background", "surface"};
  info.ignore_label = 2;
  t.class_weights = {1, 3};
  const LossOptions o = loss_options(t, info);
  EXPECT_EQ(o.ignore_label, 2);
  EXPECT_EQ(o.class_weights, (std::vector<double>{1, 3}));
  t.class_weights = {1, 3, 1};
  EXPECT_THROW(loss_options(t, info), ConfigError);
}

// (N=1, K=2, 4, 4, 4) logits and labels with a slab of the ignore label 2.
struct Volume {
  torch::Tensor logits, labels;
};
Volume volume() {
  torch::manual_seed(3);
  Volume v;
  v.logits = torch::randn({1, 2, 4, 4, 4});
  v.labels = (torch::rand({1, 4, 4, 4}) > 0.6).to(torch::kLong);
  v.labels.select(1, 3).fill_(2);  // the last slice is unlabeled
  return v;
}

TEST(LossIgnoreLabel, IgnoredVoxelsChangeNothingInAnyTerm) {
  const Volume v = volume();
  LossOptions o;
  o.ignore_label = 2;
  o.skeleton_iterations = 1;
  o.boundary_distance = 2;
  LossSpec spec;
  spec.terms = {{"ce", 1}, {"dice", 1}, {"cldice", 1}, {"skeleton_recall", 1}, {"boundary", 1}};
  const Loss loss(spec, o);
  const Loss named(LossKind::kDiceCe, o);
  torch::Tensor other = v.logits.clone();
  other.select(2, 3).mul_(-5).add_(3);  // different logits on the ignored slice only
  const LossParts a = loss.parts(v.logits, v.labels, {});
  const LossParts b = loss.parts(other, v.labels, {});
  ASSERT_TRUE(a.terms.defined());
  ASSERT_EQ(a.terms.numel(), 5);
  EXPECT_TRUE(torch::allclose(a.terms, b.terms, 1e-6, 1e-6)) << a.terms << b.terms;
  EXPECT_NEAR(named(v.logits, v.labels, {}).item<double>(), named(other, v.labels, {}).item<double>(), 1e-6);
  // Not a constant: the labelled voxels do change it.
  torch::Tensor labelled = v.logits.clone();
  labelled.select(2, 0).mul_(-5);
  EXPECT_GT((loss.parts(labelled, v.labels, {}).terms - a.terms).abs().max().item<double>(), 1e-4);
}

TEST(LossIgnoreLabel, WithoutIgnoredVoxelsDiceCeIsUnchanged) {
  Volume v = volume();
  v.labels.select(1, 3).fill_(1);  // no voxel carries the ignore label
  LossOptions o;
  o.ignore_label = 2;
  const double with = Loss(LossKind::kDiceCe, o)(v.logits, v.labels, {}).item<double>();
  const double plain = u3d::dice_ce_loss(v.logits, v.labels).item<double>();
  EXPECT_NEAR(with, plain, 1e-6);
  // And without an ignore label the named loss is the old value bit for bit.
  EXPECT_EQ(Loss(LossKind::kDiceCe)(v.logits, v.labels, {}).item<double>(), plain);
}

TEST(LossTerms, TotalIsTheWeightedSumOfTheLoggedTerms) {
  const Volume v = volume();
  torch::Tensor labels = v.labels.clamp_max(1);
  LossSpec spec;
  spec.terms = {{"ce", 1.0}, {"dice", 2.0}, {"cldice", 0.5}};
  LossOptions o;
  o.skeleton_iterations = 2;
  const Loss loss(spec, o);
  EXPECT_EQ(loss.term_names(), (std::vector<std::string>{"ce", "dice", "cldice"}));
  const LossParts p = loss.parts(v.logits, labels, {});
  const double ce = u3d::cross_entropy_loss(v.logits, labels).item<double>();
  const double dice = u3d::soft_dice_loss(v.logits, labels).item<double>();
  const double cl = u3d::cldice_loss(v.logits, labels, torch::Tensor(), 2).item<double>();
  EXPECT_NEAR(p.terms[0].item<double>(), ce, 1e-6);
  EXPECT_NEAR(p.terms[1].item<double>(), dice, 1e-6);
  EXPECT_NEAR(p.terms[2].item<double>(), cl, 1e-6);
  EXPECT_NEAR(p.total.item<double>(), ce + 2 * dice + 0.5 * cl, 1e-5);
  // The total carries the gradient.
  torch::Tensor x = v.logits.clone().requires_grad_(true);
  loss(x, labels, {}).backward();
  EXPECT_GT(x.grad().abs().sum().item<double>(), 0);
  // A named loss reports no terms.
  EXPECT_FALSE(Loss(LossKind::kDiceCe).parts(v.logits, labels, {}).terms.defined());
  EXPECT_TRUE(Loss(LossKind::kDiceCe).term_names().empty());
}

TEST(LossTerms, DeepSupervisionOnAnisotropicPatchesWeightsEveryTerm) {
  // Outputs of a 3-level network on an 8x16x16 patch, finest first; the last slice unlabeled.
  torch::manual_seed(5);
  const std::vector<torch::Tensor> outs = {torch::randn({2, 2, 8, 16, 16}), torch::randn({2, 2, 4, 8, 8}),
                                           torch::randn({2, 2, 2, 4, 4})};
  torch::Tensor labels = (torch::rand({2, 8, 16, 16}) > 0.7).to(torch::kLong);
  labels.select(1, 7).fill_(2);
  LossSpec spec;
  spec.terms = {{"ce", 1}, {"dice", 1}, {"cldice", 0.5}, {"skeleton_recall", 1}, {"boundary", 0.1}};
  LossOptions o;
  o.ignore_label = 2;
  o.skeleton_iterations = 1;
  const Loss loss(spec, o);
  const auto weights = deep_supervision_weights(3);
  const LossParts p = deep_supervision_parts(loss, outs, labels, weights);
  ASSERT_EQ(p.terms.numel(), 5);
  EXPECT_TRUE(torch::isfinite(p.terms).all().item<bool>()) << p.terms;
  const double weighted = (p.terms * torch::tensor({1.0f, 1.0f, 0.5f, 1.0f, 0.1f})).sum().item<double>();
  EXPECT_NEAR(p.total.item<double>(), weighted, 1e-5);
  // Each output's terms, weighted by its deep-supervision weight, add up to the reported terms.
  torch::Tensor expected = torch::zeros({5});
  for (size_t i = 0; i < 2; ++i) {  // the third weight is 0
    const int64_t f = 8 / outs[i].size(2);
    expected += loss.parts(outs[i], downsample_labels(labels, {f, f, f}), {}).terms * weights[i];
  }
  EXPECT_TRUE(torch::allclose(p.terms, expected, 1e-5, 1e-6));
  EXPECT_NEAR(deep_supervision_loss(loss, outs, labels, weights).item<double>(), p.total.item<double>(), 1e-6);
}

TEST(LossTerms, ClassWeightsWeightTheCrossEntropy) {
  const Volume v = volume();
  const torch::Tensor labels = v.labels.clamp_max(1);
  LossSpec spec;
  spec.terms = {{"ce", 1.0}};
  LossOptions o;
  o.class_weights = {1, 1};
  EXPECT_NEAR(Loss(spec, o)(v.logits, labels, {}).item<double>(),
              u3d::cross_entropy_loss(v.logits, labels).item<double>(), 1e-6);
  o.class_weights = {1, 5};
  const double weighted = Loss(spec, o)(v.logits, labels, {}).item<double>();
  const auto ref = torch::nn::functional::cross_entropy(
      v.logits, labels, torch::nn::functional::CrossEntropyFuncOptions().weight(torch::tensor({1.0f, 5.0f})));
  EXPECT_NEAR(weighted, ref.item<double>(), 1e-5);
}

TEST(StepMonitorTerms, SumsTheTermsOfStepsThatWereNotSkippedAndSurvivesACheckpoint) {
  StepMonitor m(torch::kCPU, /*terms=*/2);
  const auto ok = torch::zeros({});
  const auto skip = torch::ones({});
  m.record(torch::tensor(1.0f), ok, torch::tensor({0.25f, 0.5f}));
  m.record(torch::tensor(9.0f), skip, torch::tensor({7.0f, 7.0f}));  // a skipped step counts for nothing
  m.record(torch::tensor(2.0f), ok, torch::tensor({0.75f, 1.5f}));
  const auto t = m.totals();
  ASSERT_EQ(t.term_sums.size(), 2u);
  EXPECT_DOUBLE_EQ(t.term_sums[0], 1.0);
  EXPECT_DOUBLE_EQ(t.term_sums[1], 2.0);
  EXPECT_DOUBLE_EQ(t.loss_sum, 3.0);
  TrainState s;
  m.store(s);
  StepMonitor resumed(torch::kCPU, 2);
  resumed.restore(s);
  EXPECT_EQ(resumed.totals().term_sums, t.term_sums);
  resumed.start_epoch();
  EXPECT_EQ(resumed.totals().term_sums, (std::vector<double>{0, 0}));
}

// The hook data-parallel graphs use to bound their wait for the device runs before each host read.
TEST(StepMonitorTerms, CallsTheBeforeReadHookBeforeEachHostRead) {
  StepMonitor m(torch::kCPU);
  int calls = 0;
  m.set_before_read([&] { ++calls; });
  m.record(torch::tensor(1.5f), torch::zeros({}));
  EXPECT_DOUBLE_EQ(m.totals().loss_sum, 1.5);
  TrainState s;
  m.store(s);
  EXPECT_EQ(calls, 2);  // totals() and store()
  m.set_before_read([] { throw DistributedError("rank 1 crashed"); });
  EXPECT_THROW(m.totals(), DistributedError);  // the hook's error stops the read
  m.set_before_read(nullptr);
  EXPECT_DOUBLE_EQ(m.totals().loss_sum, 1.5);
}

// The status line's snapshot: on the CPU request() reads at once, so latest() is exact and tagged
// with the caller's step count; a new epoch drops the old epoch's snapshot.
TEST(StepMonitorTerms, SnapshotsAreExactOnTheCpuAndBelongToTheirEpoch) {
  StepMonitor m(torch::kCPU, /*terms=*/1);
  int calls = 0;
  m.set_before_read([&] { ++calls; });
  EXPECT_EQ(m.latest().steps, 0);
  EXPECT_EQ(m.latest().totals.term_sums, (std::vector<double>{0}));
  m.record(torch::tensor(1.5f), torch::zeros({}), torch::tensor({0.5f}));
  m.record(torch::tensor(7.0f), torch::ones({}), torch::tensor({7.0f}));
  m.request(/*steps=*/2);
  EXPECT_EQ(calls, 1);  // a host read on the CPU
  const StepMonitor::Snapshot s = m.latest();
  EXPECT_EQ(s.steps, 2);
  EXPECT_DOUBLE_EQ(s.totals.loss_sum, 1.5);
  EXPECT_EQ(s.totals.term_sums, (std::vector<double>{0.5}));
  EXPECT_EQ(s.totals.skipped, 1);
  EXPECT_EQ(s.totals.skipped_in_a_row, 1);
  const StepMonitor::Totals t = m.totals();
  EXPECT_EQ(t.loss_sum, s.totals.loss_sum);
  EXPECT_EQ(t.skipped_total, s.totals.skipped_total);
  EXPECT_EQ(t.longest_run, s.totals.longest_run);
  m.start_epoch();
  EXPECT_EQ(m.latest().steps, 0);
  EXPECT_DOUBLE_EQ(m.latest().totals.loss_sum, 0.0);
  m.record(torch::tensor(2.0f), torch::zeros({}), torch::tensor({1.0f}));
  m.request(/*steps=*/1);
  EXPECT_DOUBLE_EQ(m.latest().totals.loss_sum, 2.0);
  EXPECT_EQ(m.latest().totals.skipped, 0);
  EXPECT_EQ(m.latest().totals.skipped_total, 1);  // the run's count carries over
}

TEST(DatasetIgnoreLabel, IsRecordedAndAllowedAboveTheClasses) {
  test::TempDir dir;
  DatasetInfo info = test::segmentation_info({"image"}, {"background", "surface"});
  info.ignore_label = 2;
  CaseData c;
  c.id = "a";
  c.image = torch::zeros({1, 4, 4, 4});
  c.target = torch::zeros({4, 4, 4}, torch::kUInt8);
  c.target[0].fill_(2);
  c.target[1][1][1] = 1;
  {
    DatasetWriter w(dir / "s.h5", info);
    w.write_case(c);
    w.set_split("train", {"a"});
    w.commit();
  }
  const DatasetReader r(dir / "s.h5");
  EXPECT_EQ(r.info().ignore_label, 2);
  EXPECT_EQ(r.info().num_classes, 2);
  EXPECT_EQ(r.read_case("a").target.max().item<int64_t>(), 2);
  // A label above the classes that is not the ignore label is refused, naming the case.
  info.ignore_label = -1;
  {
    DatasetWriter w(dir / "t.h5", info);
    w.write_case(c);
    w.set_split("train", {"a"});
    w.commit();
  }
  const DatasetReader plain(dir / "t.h5");
  EXPECT_EQ(plain.info().ignore_label, -1);
  try {
    plain.read_case("a");
    FAIL() << "label 2 of a 2-class dataset without an ignore label was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'target' holds label values in [0, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace u3d
