#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/logging.h"
#include "u3d/monitor/metrics_csv.h"

namespace u3d {
namespace {

size_t count_entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(Files, AtomicWriteReplacesContent) {
  test::TempDir dir;
  const auto p = dir / "a.txt";
  write_file_atomic(p, "first");
  write_file_atomic(p, "second");
  EXPECT_EQ(test::read_text(p), "second");
  EXPECT_EQ(count_entries(dir.path()), 1u);  // no temporary file left
}

TEST(Files, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  test::TempDir dir;
  const auto p = dir / "a.txt";
  write_file_atomic(p, "old");
  EXPECT_THROW(write_file_atomic(p,
                                 [](const ByteSink& sink) {
                                   sink("partial", 7);
                                   throw IoError("simulated failure");
                                 }),
               IoError);
  EXPECT_EQ(test::read_text(p), "old");
  EXPECT_EQ(count_entries(dir.path()), 1u);
}

TEST(Files, UnwritableFolderNamesThePath) {
  test::TempDir dir;
  test::write_text(dir / "file", "x");
  try {
    ensure_writable_directory(dir / "file" / "sub");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "file" / "sub").string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_file_atomic(dir / "file" / "x.txt", "y"), IoError);
}

// Every output folder (run, checkpoints, predictions, export, synth, import) is made here: a
// symbolic link on the way that leads nowhere is named with its target, not "File exists", and is kept.
TEST(Files, ADanglingLinkOnTheWayToAnOutputFolderIsNamed) {
  test::TempDir dir;
  fs::create_symlink(dir / "gone", dir / "link");
  for (const auto& out : {dir / "link", dir / "link" / "predictions" / "val"}) {
    try {
      ensure_writable_directory(out);
      FAIL() << "expected IoError for " << out;
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((dir / "link").string() + ": is a symbolic link to " + (dir / "gone").string()),
                std::string::npos)
          << what;
    }
  }
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link")));
  EXPECT_FALSE(fs::exists(dir / "gone"));
}

TEST(Files, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1.5e9), "1.5 GB");
}

TEST(MetricsCsv, ResumeDropsLaterAndPartialRows) {
  test::TempDir dir;
  MetricsCsv csv(dir / "m.csv", {"epoch", "loss"});
  csv.start_fresh();
  csv.append({{"epoch", "1"}, {"loss", "0.5"}});
  csv.append({{"epoch", "2"}, {"loss", "0.4"}});
  csv.append({{"epoch", "3"}, {"loss", "0.3"}});
  {
    std::ofstream out(dir / "m.csv", std::ios::app);
    out << "4,0.2";  // a crash mid-line
  }
  MetricsCsv again(dir / "m.csv", {"epoch", "loss"});
  again.resume(2);
  EXPECT_EQ(test::read_text(dir / "m.csv"), "epoch,loss\n1,0.5\n2,0.4\n");
  again.append({{"epoch", "3"}, {"loss", "0.1"}});
  EXPECT_EQ(test::read_text(dir / "m.csv"), "epoch,loss\n1,0.5\n2,0.4\n3,0.1\n");
}

TEST(MetricsCsv, ResumeWithDifferentColumnsIsAnError) {
  test::TempDir dir;
  MetricsCsv csv(dir / "m.csv", {"epoch", "loss"});
  csv.start_fresh();
  MetricsCsv other(dir / "m.csv", {"epoch", "val"});
  EXPECT_THROW(other.resume(1), IoError);
}

}  // namespace
}  // namespace u3d
