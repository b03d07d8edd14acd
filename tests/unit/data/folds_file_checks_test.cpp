// folds.json as read back (data/folds.h folds_from_json): a file whose folds leak a held-out case
// into training, hold a case out twice, or train on a case no fold holds out is refused, naming the
// file, the fold and the case.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/data/folds.h"

namespace u3d {
namespace {

std::string refusal(const std::vector<FoldSplit>& folds) {
  return test::error_of<DataError>([&] { folds_from_json(folds_json(folds), "x/folds.json"); });
}

TEST(FoldsFile, LeakingOrOverlappingFoldsAreRefused) {
  const std::vector<FoldSplit> good = {{{"c", "d"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}};
  EXPECT_EQ(refusal(good), "no error");
  // A fold's train list may leave cases out (nnU-Net allows it), never add its own.
  EXPECT_EQ(refusal({{{"c"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}}), "no error");
  EXPECT_EQ(refusal({{{"c", "d", "a"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}}),
            "x/folds.json: fold 0 trains on case 'a' that it validates on; a fold's train and val lists never "
            "overlap");
  EXPECT_EQ(refusal({{{"c", "d"}, {"a", "b"}}, {{"a", "b"}, {"c", "a"}}}),
            "x/folds.json: case 'a' is held out by fold 0 and again by fold 1; each case belongs to one fold's val "
            "list");
  EXPECT_EQ(refusal({{{"c", "d", "e"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}}),
            "x/folds.json: fold 0 trains on case 'e', which no fold's val list holds");
  EXPECT_EQ(refusal({{{"c", "c"}, {"a", "b"}}, {{"a", "b"}, {"c", "d"}}}),
            "x/folds.json: fold 0 lists case 'c' twice in train");
  // An empty train list names the file and the fold (training said only "the training split holds
  // no cases").
  EXPECT_EQ(refusal({{{"c", "d"}, {"a", "b"}}, {{}, {"c", "d"}}}),
            "x/folds.json: fold 1 has an empty train list; each fold trains on the cases the other folds hold out");
}

}  // namespace
}  // namespace u3d
