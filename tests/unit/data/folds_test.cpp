// k-fold cross-validation (data/folds.h) and fold ensembles (predict/ensemble.h).
#include <gtest/gtest.h>

#include <set>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/run.h"
#include "u3d/data/folds.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/predict/ensemble.h"
#include "u3d/predict/predictor.h"

namespace u3d {
namespace {

std::vector<std::string> case_names(int n) {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back("case_" + std::to_string(100 + i));
  return ids;
}

TEST(Folds, PartitionTheCasesIntoBalancedDisjointFolds) {
  const auto ids = case_names(17);
  const auto folds = make_folds(ids, 5, 42);
  ASSERT_EQ(folds.size(), 5u);
  std::multiset<std::string> seen;
  for (const auto& f : folds) {
    EXPECT_TRUE(f.val.size() == 3u || f.val.size() == 4u) << f.val.size();
    seen.insert(f.val.begin(), f.val.end());
    // train is exactly the complement of val
    std::set<std::string> both(f.train.begin(), f.train.end());
    both.insert(f.val.begin(), f.val.end());
    EXPECT_EQ(both.size(), ids.size());
    EXPECT_EQ(f.train.size() + f.val.size(), ids.size());
    EXPECT_TRUE(std::is_sorted(f.val.begin(), f.val.end()));
  }
  EXPECT_EQ(seen, std::multiset<std::string>(ids.begin(), ids.end()));  // every case in exactly one val
}

TEST(Folds, DependOnlyOnTheCasesTheCountAndTheSeed) {
  auto ids = case_names(12);
  const auto a = make_folds(ids, 3, 7);
  std::reverse(ids.begin(), ids.end());
  ids.push_back(ids.front());  // order and duplicates do not matter
  const auto b = make_folds(ids, 3, 7);
  for (size_t f = 0; f < a.size(); ++f) EXPECT_EQ(a[f].val, b[f].val);
  const auto c = make_folds(ids, 3, 8);
  bool differs = false;
  for (size_t f = 0; f < a.size(); ++f) differs |= a[f].val != c[f].val;
  EXPECT_TRUE(differs) << "another seed should shuffle the cases differently";
  EXPECT_THROW(make_folds(case_names(2), 3, 7), ConfigError);
}

TEST(Folds, JsonRoundTripAndBrokenFilesNameTheFile) {
  const auto folds = make_folds(case_names(6), 2, 1);
  const auto back = folds_from_json(folds_json(folds), "folds.json");
  ASSERT_EQ(back.size(), 2u);
  for (size_t f = 0; f < 2; ++f) {
    EXPECT_EQ(back[f].train, folds[f].train);
    EXPECT_EQ(back[f].val, folds[f].val);
  }
  try {
    folds_from_json("{\"train\": 1}", "x/folds.json");
    FAIL() << "expected a DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("x/folds.json"), std::string::npos) << e.what();
  }
}

class FoldFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    test::make_phantom(dir / "p.h5", Task::kSegmentation, 8, 8);
    test::write_text(dir / "exp.yaml", test::tiny_config(dir / "p.h5", "cv", Task::kSegmentation));
  }
  Config config(int64_t folds, const std::string& fold) {
    return load_config(dir / "exp.yaml", {"experiment.output_dir=" + (dir / "runs").string(),
                                          "data.folds=" + std::to_string(folds), "experiment.fold=" + fold});
  }
  test::TempDir dir;
};

TEST_F(FoldFiles, PoolTrainAndValAndKeepTheSavedFoldsEvenWhenTheSeedChanges) {
  const DatasetReader reader(dir / "p.h5");
  Config cfg = config(4, "1");
  const auto pool = fold_pool(reader, cfg);
  const size_t expected = reader.split("train").size() + reader.split("val").size();
  EXPECT_EQ(pool.size(), expected);
  EXPECT_EQ(RunPaths(cfg).root, dir / "runs" / "cv" / "fold_1");
  const auto saved = load_or_save_folds(reader, cfg);
  ASSERT_TRUE(std::filesystem::exists(dir / "runs" / "cv" / "folds.json"));
  cfg.experiment.seed = 999;  // would shuffle differently, but the saved folds win
  const auto again = load_folds(reader, cfg);
  for (size_t f = 0; f < saved.size(); ++f) EXPECT_EQ(again[f].val, saved[f].val);
  // Another fold count does not match the saved folds: refused, naming the file.
  cfg.data.folds = 3;
  try {
    load_folds(reader, cfg);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("folds.json"), std::string::npos) << e.what();
  }
}

TEST_F(FoldFiles, ConfigChecksTheFoldKeys) {
  EXPECT_NO_THROW(config(5, "all"));
  EXPECT_THROW(config(5, "5"), ConfigError);
  EXPECT_NO_THROW(config(5, ""));  // --predict-only --ensemble needs no fold; training refuses it (run_command)
  EXPECT_THROW(config(0, "1"), ConfigError);
  EXPECT_THROW(config(1, "0"), ConfigError);
  EXPECT_THROW(config(5, "first"), ConfigError);
  EXPECT_EQ(fold_number(config(5, "3")), 3);
  EXPECT_EQ(fold_number(config(5, "all")), std::nullopt);
}

// Two identical members predict what one does; two different ones average their softmax (or outputs).
TEST(Ensemble, OfIdenticalModelsEqualsOneModelAndAveragesProbabilities) {
  torch::manual_seed(3);
  ModelConfig m;
  m.levels = 2;
  m.base_filters = 4;
  auto a = build_network(m, 1, 3);
  auto b = build_network(m, 1, 3);
  auto a_copy = build_network(m, 1, 3);
  {
    torch::NoGradGuard no_grad;
    auto src = a->parameters();
    auto dst = a_copy->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  const auto image = torch::randn({1, 12, 16, 20});
  SlidingWindowOptions sw;
  sw.patch = {8, 8, 8};
  sw.batch_size = 3;
  const auto one = torch::softmax(sliding_window_predict(*a, image, sw, torch::kCPU), 0);
  EnsembleNetwork same(std::vector<Network>{a, a_copy}, Task::kSegmentation);
  const auto two = torch::softmax(sliding_window_predict(*same, image, sw, torch::kCPU), 0);
  EXPECT_TRUE(torch::allclose(one, two, /*rtol=*/1e-5, /*atol=*/1e-6)) << (one - two).abs().max().item<float>();

  // One window covering the volume: the ensemble's probabilities are the members' mean.
  SlidingWindowOptions whole;
  whole.patch = {12, 16, 20};
  whole.gaussian = false;
  const auto x = image.unsqueeze(0).narrow(2, 0, 12);
  a->eval();
  b->eval();
  torch::NoGradGuard no_grad;
  const auto mean = (torch::softmax(a->forward(x), 1) + torch::softmax(b->forward(x), 1)) / 2;
  EnsembleNetwork pair(std::vector<Network>{a, b}, Task::kSegmentation);
  const auto got = torch::softmax(sliding_window_predict(*pair, image, whole, torch::kCPU), 0);
  EXPECT_TRUE(torch::allclose(got, mean.squeeze(0), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(got, torch::softmax(a->forward(x), 1).squeeze(0), 1e-3, 1e-3))
      << "two different models should not predict like the first alone";

  auto ra = build_network(m, 1, 1);
  auto rb = build_network(m, 1, 1);
  ra->eval();
  rb->eval();
  EnsembleNetwork regression(std::vector<Network>{ra, rb}, Task::kDose);
  const auto dose = sliding_window_predict(*regression, image, whole, torch::kCPU);
  EXPECT_TRUE(torch::allclose(dose, ((ra->forward(x) + rb->forward(x)) / 2).squeeze(0), 1e-5, 1e-6));
}

}  // namespace
}  // namespace u3d
