// core/output_guard.h: an output is refused when it is one of the command's inputs, however named.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_guard.h"

namespace u3d {
namespace {

TEST(OutputGuard, SameFileThroughPathsAndLinksAndNotYetWritten) {
  test::TempDir dir;
  write_file_atomic(dir / "d.h5", "data");
  fs::create_directories(dir / "sub");
  fs::create_symlink(dir / "d.h5", dir / "sub" / "link.h5");
  fs::create_hard_link(dir / "d.h5", dir / "hard.h5");
  EXPECT_TRUE(same_file(dir / "d.h5", dir / "sub" / ".." / "d.h5"));
  EXPECT_TRUE(same_file(dir / "sub" / "link.h5", dir / "d.h5"));
  EXPECT_TRUE(same_file(dir / "hard.h5", dir / "d.h5"));
  EXPECT_TRUE(same_file(dir / "sub" / ".." / "new.json", dir / "new.json"));  // neither exists yet
  EXPECT_FALSE(same_file(dir / "d.h5", dir / "e.h5"));
  EXPECT_FALSE(same_file(dir / "d.h5", dir / "sub"));
  EXPECT_FALSE(same_file(dir / "d.h5", ""));
}

TEST(OutputGuard, RefusalNamesTheCommandTheFlagTheOutputAndTheInput) {
  test::TempDir dir;
  write_file_atomic(dir / "d.h5", "data");
  fs::create_symlink(dir / "d.h5", dir / "link.h5");
  try {
    refuse_output_over_input("plan", "--out", dir / "link.h5", {dir / "other.h5", dir / "d.h5"});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "plan: --out " + (dir / "link.h5").string() + " is the input " +
                                         (dir / "d.h5").string() +
                                         "; write it elsewhere (--force replaces an earlier output, never an input)");
  }
  EXPECT_NO_THROW(refuse_output_over_input("plan", "--out", dir / "plan.yaml", {dir / "d.h5"}));
  EXPECT_EQ(test::read_text(dir / "d.h5"), "data");
}

}  // namespace
}  // namespace u3d
