// The cross-validation summary (evaluate/cross_validation.h) over forged experiment folders: the
// val_metrics.csv a fold writes (NaN Dice for a case without foreground), only the folds that
// folds.json lists, and each fold's cases checked against its held-out cases.
#include "u3d/evaluate/cross_validation.h"
#include "expectations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/folds.h"

namespace u3d {
namespace {

using test::contains;

class CvSummaryFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_text(dir / "folds.json", folds_json({{{"c", "d"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}}));
  }
  void fold(int64_t k, const std::string& rows) {
    const fs::path folder = dir / ("fold_" + std::to_string(k)) / "predictions";
    fs::create_directories(folder);
    test::write_text(folder / "val_metrics.csv", "case,dice,baseline_dice\n" + rows);
  }
  test::TempDir dir;
};

// What a fold writes for a held-out case without foreground predicted empty: Dice "nan".
TEST_F(CvSummaryFiles, AnUndefinedDiceIsLeftOutOfTheMeansNotRefused) {
  fold(0, "a,0.8,0\nb,nan,nan\nmean,0.8,0\n");
  fold(1, "c,0.6,0\nd,0.4,0\nmean,0.5,0\n");
  const CvSummary s = summarize_cross_validation(dir.path());
  ASSERT_EQ(s.folds.size(), 2u);
  EXPECT_EQ(s.folds[0].cases.size(), 2u);
  EXPECT_TRUE(std::isnan(s.folds[0].values[1]));
  EXPECT_DOUBLE_EQ(s.folds[0].mean, 0.8);
  EXPECT_DOUBLE_EQ(s.pooled, (0.8 + 0.6 + 0.4) / 3);
  EXPECT_DOUBLE_EQ(s.mean_of_folds, (0.8 + 0.5) / 2);
  // Anything else that is not a number still names the file and the line.
  fold(1, "c,0.6,0\nd,abc,0\n");
  const std::string e = test::error_of<DataError>([&] { summarize_cross_validation(dir.path()); });
  EXPECT_TRUE(contains(e, "fold_1/predictions/val_metrics.csv: line 3")) << e;
}

// A fold folder that folds.json does not list (left from an earlier experiment with more folds) is
// not pooled, and the summary says so; a missing fold is any of folds.json's without a CSV.
TEST_F(CvSummaryFiles, OnlyTheFoldsOfFoldsJsonArePooled) {
  fold(1, "c,0.6,0\nd,0.4,0\n");
  fold(2, "a,0.1,0\nb,0.1,0\n");
  const CvSummary s = summarize_cross_validation(dir.path());
  ASSERT_EQ(s.folds.size(), 1u);
  EXPECT_EQ(s.folds[0].fold, 1);
  EXPECT_DOUBLE_EQ(s.pooled, 0.5);
  EXPECT_EQ(s.missing, std::vector<int64_t>{0});
  EXPECT_EQ(s.stray, std::vector<std::string>{"fold_2"});
  const std::string table = cv_summary_table(s);
  EXPECT_TRUE(contains(table, "fold_2: not one of the 2 folds of folds.json (fold_0 .. fold_1); left out")) << table;
  EXPECT_TRUE(contains(table, "fold 0: no val_metrics.csv")) << table;
}

// Every folder named fold_* that is not one of folds.json's fold_0 .. fold_K-1 is named as left out,
// also when its name is not a plain number (a copy, a zero-padded name): none is pooled silently.
TEST_F(CvSummaryFiles, EveryStrayFoldFolderIsNamed) {
  fold(1, "c,0.6,0\nd,0.4,0\n");
  for (const char* name : {"fold_01", "fold_1_old", "fold_x"}) {
    std::filesystem::create_directories(dir / name / "predictions");
    test::write_text(dir / name / "predictions" / "val_metrics.csv", "case,dice,baseline_dice\nc,0.9,0\n");
  }
  const CvSummary s = summarize_cross_validation(dir.path());
  std::vector<std::string> stray = s.stray;
  std::sort(stray.begin(), stray.end());
  EXPECT_EQ(stray, (std::vector<std::string>{"fold_01", "fold_1_old", "fold_x"}));
  EXPECT_DOUBLE_EQ(s.pooled, 0.5);
  const std::string table = cv_summary_table(s);
  for (const auto& name : stray) EXPECT_TRUE(contains(table, name + ": not one of the 2 folds")) << table;
  EXPECT_TRUE(contains(table, "fold 0: no val_metrics.csv")) << table;
}

// A fold's CSV that scores a case outside the fold's held-out cases (another split, a stale file)
// or a case twice is refused, naming the file and the case.
TEST_F(CvSummaryFiles, AFoldScoringCasesItDidNotHoldOutIsRefused) {
  fold(0, "a,0.8,0\nc,0.7,0\n");
  fold(1, "c,0.6,0\nd,0.4,0\n");
  std::string e = test::error_of<DataError>([&] { summarize_cross_validation(dir.path()); });
  EXPECT_TRUE(contains(e, "fold_0/predictions/val_metrics.csv: line 3: case 'c' is not a held-out case of fold 0"))
      << e;
  fold(0, "a,0.8,0\na,0.7,0\n");
  e = test::error_of<DataError>([&] { summarize_cross_validation(dir.path()); });
  EXPECT_TRUE(contains(e, "line 3: case 'a' is scored twice")) << e;
  // Without folds.json nothing says which folds belong to the experiment.
  fs::remove(dir / "folds.json");
  e = test::error_of<DataError>([&] { summarize_cross_validation(dir.path()); });
  EXPECT_TRUE(contains(e, "folds.json: not found")) << e;
}

}  // namespace
}  // namespace u3d
