// Issue 37: training's CPU threads. Intra-op threads and loader workers together never exceed the
// cores minus one (at least 1 each); an explicit setting is kept, and warned about over the cores.
#include <gtest/gtest.h>

#include "u3d/core/config.h"
#include "u3d/core/parallel.h"
#include "u3d/core/thread_budget.h"

namespace u3d {
namespace {

struct Split {
  int64_t intra_op, workers;
};

Split split(int64_t cores, int64_t threads, int64_t workers, bool cuda) {
  const ThreadBudget b = split_threads(cores, threads, workers, cuda);
  return {b.intra_op, b.workers};
}

bool operator==(const Split& a, const Split& b) { return a.intra_op == b.intra_op && a.workers == b.workers; }
void PrintTo(const Split& s, std::ostream* os) { *os << s.intra_op << " intra-op + " << s.workers << " workers"; }

TEST(ThreadBudget, TheDefaultsLeaveOneCoreFreeAtLeastOneEach) {
  // On the CPU the network gets the most; on CUDA the loader.
  EXPECT_EQ(split(1, 0, 0, false), (Split{1, 1}));  // at least 1 each: 2 on 1 core
  EXPECT_EQ(split(2, 0, 0, false), (Split{1, 1}));
  EXPECT_EQ(split(16, 0, 0, false), (Split{11, 4}));
  EXPECT_EQ(split(64, 0, 0, false), (Split{47, 16}));
  EXPECT_EQ(split(1, 0, 0, true), (Split{1, 1}));
  EXPECT_EQ(split(2, 0, 0, true), (Split{1, 1}));
  EXPECT_EQ(split(16, 0, 0, true), (Split{4, 11}));
  EXPECT_EQ(split(64, 0, 0, true), (Split{16, 47}));
  for (const int64_t cores : {3, 4, 8, 16, 24, 64, 128}) {
    for (const bool cuda : {false, true}) {
      const ThreadBudget b = split_threads(cores, 0, 0, cuda);
      EXPECT_EQ(b.intra_op + b.workers, cores - 1) << cores;
      EXPECT_GE(b.intra_op, 1);
      EXPECT_GE(b.workers, 1);
      EXPECT_FALSE(b.over());
      EXPECT_EQ(b.warning(), "");
    }
  }
  // 24 cores, the slice user's machine: 17 + 6, not 23 + 23.
  EXPECT_EQ(split(24, 0, 0, false), (Split{17, 6}));
}

TEST(ThreadBudget, OneSettingGivesTheOtherTheRestBothAreKept) {
  EXPECT_EQ(split(16, 4, 0, false), (Split{4, 11}));
  EXPECT_EQ(split(16, 0, 6, false), (Split{9, 6}));
  EXPECT_EQ(split(16, 20, 0, false), (Split{20, 1}));  // nothing left: at least 1
  EXPECT_EQ(split(2, 1, 0, true), (Split{1, 1}));
  EXPECT_EQ(split(16, 12, 12, true), (Split{12, 12}));  // kept as given
}

TEST(ThreadBudget, TheBannerLineAndTheWarning) {
  EXPECT_EQ(split_threads(8, 0, 0, false).line(), "threads: 5 intra-op + 2 loader workers of 8 cores (leaves 1 free)");
  EXPECT_EQ(split_threads(16, 0, 0, true).line(),
            "threads: 4 intra-op + 11 loader workers of 16 cores (leaves 1 free)");
  EXPECT_EQ(split_threads(2, 0, 0, false).line(),
            "threads: 1 intra-op + 1 loader worker of 2 cores (leaves none free: at least 1 each)");
  EXPECT_EQ(split_threads(1, 0, 0, false).line(), "threads: 1 intra-op + 1 loader worker of 1 core (1 over the cores)");
  EXPECT_EQ(split_threads(1, 0, 0, false).warning(), "");  // the floor, not a setting
  const ThreadBudget over = split_threads(8, 8, 8, false);
  EXPECT_TRUE(over.over());
  EXPECT_EQ(over.line(), "threads: 8 intra-op + 8 loader workers of 8 cores (8 over the cores)");
  EXPECT_EQ(over.warning(),
            "training.threads 8 + data.workers 8 = 16 threads on 8 cores: the machine is oversubscribed; set both "
            "to 0 for the default (7 in all)");
  EXPECT_EQ(split_threads(8, 4, 3, false).warning(), "");
}

// host_threads() and data_workers() (core/run.h) follow the rule on this machine.
TEST(ThreadBudget, RunResolvesThroughIt) {
  Config cfg;
  cfg.training.device = Device::kCpu;
  const ThreadBudget b = thread_budget(cfg, false);
  EXPECT_EQ(b.cores, core_count());
  EXPECT_EQ(b.intra_op, split_threads(core_count(), 0, 0, false).intra_op);
  EXPECT_LE(b.intra_op + b.workers, std::max<int64_t>(2, core_count() - 1));
  cfg.training.threads = 3;
  cfg.data.workers = 2;
  EXPECT_EQ(thread_budget(cfg, false).intra_op, 3);
  EXPECT_EQ(thread_budget(cfg, false).workers, 2);
}

}  // namespace
}  // namespace u3d
