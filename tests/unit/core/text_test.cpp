// The one list splitter and strict number parsers (include/u3d/core/text.h) that every comma list of
// the CLI and the config goes through.
#include <gtest/gtest.h>

#include "u3d/core/text.h"

namespace u3d {
namespace {

TEST(Text, SplitKeepsEmptyItemsAndTakesAnyOfTheSeparators) {
  EXPECT_EQ(split("a,,b"), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split(""), (std::vector<std::string>{""}));
  EXPECT_EQ(split("a,"), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(split("64x32,16", ",x"), (std::vector<std::string>{"64", "32", "16"}));
}

TEST(Text, NumbersAreParsedStrictly) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_EQ(parse_int("-3"), -3);
  for (const char* bad : {"", " 1", "1 ", "1.5", "0x10", "12abc", "99999999999999999999"}) {
    EXPECT_FALSE(parse_int(bad)) << bad;
  }
  EXPECT_DOUBLE_EQ(*parse_double("1.5e-3"), 1.5e-3);
  for (const char* bad : {"", " 1", "1.5mm", "inf", "nan", "1e999"}) EXPECT_FALSE(parse_double(bad)) << bad;
  EXPECT_EQ(parse_int_list("1,2,4"), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_FALSE(parse_int_list("1,,4"));
  EXPECT_EQ(parse_double_list("0.5,1,2"), (std::vector<double>{0.5, 1, 2}));
  EXPECT_FALSE(parse_double_list("0.5,x"));
}

TEST(Text, EndsWithComparesTheTail) {
  EXPECT_TRUE(ends_with("case_0000.nii.gz", ".nii.gz"));
  EXPECT_FALSE(ends_with("case_0000.nii", ".nii.gz"));
  EXPECT_TRUE(ends_with("x", ""));
  EXPECT_FALSE(ends_with("gz", ".nii.gz"));  // shorter than the suffix
  EXPECT_TRUE(ends_with(".nii", ".nii"));
}

}  // namespace
}  // namespace u3d
