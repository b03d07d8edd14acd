// predict/raw_cases.h: nnU-Net's input naming (NAME_0000.nii.gz per channel) grouped into cases,
// and the one-line refusals, on files that are only names (nothing is read).
#include "u3d/predict/raw_cases.h"

#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"

namespace u3d {
namespace {

class RawCases : public ::testing::Test {
 protected:
  fs::path touch(const std::string& relative) {
    const fs::path p = dir / relative;
    fs::create_directories(p.parent_path());
    test::write_text(p, "");
    return p;
  }
  test::TempDir dir;
};

TEST_F(RawCases, GroupsChannelsByNameInChannelOrder) {
  touch("a/liver_7_0001.nii.gz");
  touch("a/liver_7_0000.nii.gz");
  touch("a/.hidden_0000.nii.gz");  // hidden: left alone
  touch("a/notes.txt");            // another ending: left alone
  touch("b/ct_0000.nii");
  touch("b/ct_0001.nii");
  const auto one = touch("c/x_0000.nii.gz");
  const auto two = touch("c/x_0001.nii.gz");
  const auto cases = find_raw_cases({dir / "a", dir / "b", one, two}, 2);
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0].id, "ct");
  EXPECT_EQ(cases[0].channels, (std::vector<fs::path>{dir / "b" / "ct_0000.nii", dir / "b" / "ct_0001.nii"}));
  EXPECT_EQ(cases[1].id, "liver_7");
  EXPECT_EQ(cases[1].channels.back(), dir / "a" / "liver_7_0001.nii.gz");
  EXPECT_EQ(cases[2].id, "x");
  EXPECT_EQ(cases[2].channels, (std::vector<fs::path>{one, two}));
}

TEST_F(RawCases, RefusesWithOneLineNamingTheFileOrCase) {
  touch("one/p_0000.nii.gz");
  // Naming refusals are usage errors (exit 2): the files are fine, their names or number are not.
  EXPECT_EQ(test::error_of<UsageError>([&] { find_raw_cases({dir / "one"}, 2); }),
            "case 'p' (" + (dir / "one").string() +
                "): channel files _0000 (1); the model takes 2 input channel(s): expected _0000 to _0001");
  touch("gap/p_0000.nii.gz");
  touch("gap/p_0002.nii.gz");
  EXPECT_NE(
      test::error_of<UsageError>([&] { find_raw_cases({dir / "gap"}, 2); }).find("channel files _0000, _0002 (2)"),
      std::string::npos);
  const auto plain = touch("plain/p.nii.gz");
  EXPECT_EQ(test::error_of<UsageError>([&] { find_raw_cases({plain}, 1); }),
            plain.string() +
                ": not named as nnU-Net's input files: expected NAME_0000.nii.gz (then _0001, ... per "
                "channel)");
  const auto gz = touch("twice/p_0000.nii.gz");
  const auto nii = touch("twice/p_0000.nii");
  EXPECT_NE(test::error_of<UsageError>([&] {
              find_raw_cases({gz, nii}, 1);
            }).find("case 'p': channel _0000 given twice"),
            std::string::npos);
  fs::create_directories(dir / "empty");
  EXPECT_THROW(find_raw_cases({dir / "empty"}, 1), DataError);
  EXPECT_THROW(find_raw_cases({dir / "nope"}, 1), UsageError);
  EXPECT_THROW(find_raw_cases({touch("x.txt")}, 1), UsageError);
}

}  // namespace
}  // namespace u3d
