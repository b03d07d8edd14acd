// The one "regular file of sane size" check, the one declared-size check, allocation failures,
// one-line error messages and staged folders (issue 35, the cli package).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/json.h"
#include "u3d/core/staged_folder.h"

namespace u3d {
namespace {

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

// A device, a FIFO, a folder, a dangling link or an oversized file is refused by name, at once
// (`--config /dev/zero` used to read until the kernel killed the trainer).
TEST(InputLimits, OnlyRegularFilesOfASaneSizeAreRead) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  fs::create_directory_symlink(dir / "nowhere", dir / "dangling");
  fs::create_directories(dir / "folder");
  std::ofstream(dir / "big.yaml").close();
  fs::resize_file(dir / "big.yaml", uint64_t{20} << 20);  // sparse: 20 MiB of zeros
  test::write_text(dir / "ok.yaml", "data: {path: d.h5}\n");
  const auto problem = [](const fs::path& p) { return input_file_problem(p, kMaxConfigBytes, "a config file"); };
  EXPECT_EQ(problem("/dev/zero"), "is a character device; expected a config file (a regular file)");
  EXPECT_EQ(problem(dir / "fifo"), "is a FIFO (named pipe); expected a config file (a regular file)");
  EXPECT_EQ(problem(dir / "folder"), "is a folder; expected a config file (a regular file)");
  EXPECT_EQ(problem(dir / "dangling"), "is a symbolic link to nothing (dangling)");
  EXPECT_EQ(problem(dir / "missing"), "not found");
  EXPECT_EQ(problem(dir / "big.yaml"), "is 21.0 MB, more than the 16.8 MB a config file may hold");
  EXPECT_EQ(problem(dir / "ok.yaml"), "");
  // read_file (every CSV, JSON and YAML the trainer reads) makes the same check.
  EXPECT_EQ(test::error_of<IoError>([&] { read_file(dir / "fifo"); }),
            (dir / "fifo").string() + ": is a FIFO (named pipe); expected a text file (a regular file)");
  // The config loader: exit 2, naming the file, before reading a byte.
  for (const fs::path& p : {fs::path("/dev/zero"), dir / "fifo", dir / "big.yaml"}) {
    const std::string msg = test::error_of<ConfigError>([&] { load_config(p); });
    EXPECT_TRUE(has(msg, p.string() + ": is ")) << msg;
  }
}

TEST(InputLimits, DeclaredSizesBeyondMemoryAreRefused) {
  EXPECT_EQ(declared_size_problem({16, 16, 16}, 4, "float"), "");
  const std::string problem = declared_size_problem({500000, 500000, 1}, 4, "int");
  EXPECT_TRUE(has(problem, "declares shape [500000, 500000, 1] (1.0 TB as int), more than the ")) << problem;
  EXPECT_TRUE(has(problem, "of memory available")) << problem;
  EXPECT_EQ(test::error_of<DataError>([] {
              check_declared_size("v.tif:", {500000, 500000, 1}, 4, "int");
            }),
            "v.tif: " + problem);
}

// LibTorch's allocator error and std::bad_alloc are recognised (with the size asked for), nothing else.
TEST(InputLimits, HostAllocationFailuresAreRecognised) {
  try {
    (void)torch::empty({int64_t{1} << 50}, torch::kUInt8);  // 1 PB
    GTEST_SKIP() << "this machine allocated 1 PB";
  } catch (const std::exception& e) {
    EXPECT_EQ(host_allocation_failure(e), std::optional<int64_t>(int64_t{1} << 50)) << e.what();
  }
  EXPECT_EQ(host_allocation_failure(std::bad_alloc()), std::optional<int64_t>(0));
  EXPECT_EQ(host_allocation_failure(std::runtime_error("x")), std::nullopt);
  EXPECT_EQ(host_allocation_failure(DataError("not enough memory")), std::nullopt);
}

// A newline in a name (a path) no longer cuts the message: our messages keep one line with the
// name escaped; LibTorch's keep their first line only.
TEST(InputLimits, ErrorLinesEscapeControlCharactersOfOurMessages) {
  EXPECT_EQ(error_line(ConfigError("config file a\nb.yaml not found")), "config file a\\nb.yaml not found");
  EXPECT_EQ(error_line(IoError("x\ty\x1b[31m: failed")), "x\\ty\\x1b[31m: failed");
  EXPECT_EQ(error_line(std::runtime_error("first\nsecond")), "first");
  try {
    TORCH_CHECK(false, "boom");
  } catch (const c10::Error& e) {
    EXPECT_EQ(error_line(e), "boom");
    EXPECT_EQ(error_line(DataError(std::string("wrapped: ") + e.what())), "wrapped: boom");
  }
}

// A JSON file that does not parse (a tampered fingerprint, folds.json, dataset.json): where and
// what, without nlohmann's "[json.exception.parse_error.101]" tag.
TEST(InputLimits, JsonParseErrorsNameTheFileAndThePlace) {
  const std::string msg = test::error_of<DataError>([] { parse_json("{\"a\": 1,\n x}", "f.json"); });
  EXPECT_EQ(msg.rfind("f.json: not valid JSON: parse error at line 2, column 2: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

TEST(StagedFolder, AFailedWriteLeavesNothingAndACommitReplacesTheWhole) {
  test::TempDir dir;
  const fs::path out = dir / "out";
  {
    StagedFolder staged(out);
    test::write_text(staged.path() / "a.txt", "a");
    EXPECT_FALSE(fs::exists(out));
  }  // no commit: a failure
  EXPECT_TRUE(fs::is_empty(dir.path())) << "a failed write left something";
  {
    StagedFolder staged(out);
    test::write_text(staged.path() / "a.txt", "first");
    test::write_text(staged.path() / "old.txt", "of the first run");
    staged.commit();
  }
  {
    StagedFolder staged(out);
    test::write_text(staged.path() / "a.txt", "second");
    staged.commit();
  }
  EXPECT_EQ(test::read_text(out / "a.txt"), "second");
  EXPECT_FALSE(fs::exists(out / "old.txt")) << "a replaced folder must not keep the previous run's files";
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1u) << "a staged or old folder was left";
}

}  // namespace
}  // namespace u3d
