// metrics.csv across versions (monitor/metrics_csv.h): a run resumed by a newer trainer keeps the
// rows an older one wrote and leaves the columns added since (val_seconds, dice_<class>) empty.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/monitor/metrics_csv.h"

namespace u3d {
namespace {

TEST(MetricsCsvColumns, ResumeOfAnOlderFileKeepsItsRowsAndLeavesNewColumnsEmpty) {
  test::TempDir dir;
  MetricsCsv old(dir / "m.csv", {"epoch", "loss", "best"});
  old.start_fresh();
  old.append({{"epoch", "1"}, {"loss", "0.5"}, {"best", "1"}});
  old.append({{"epoch", "2"}, {"loss", "0.4"}, {"best", "0"}});
  MetricsCsv now(dir / "m.csv", {"epoch", "loss", "dice_liver", "best", "val_seconds"});
  now.resume(1);
  EXPECT_EQ(test::read_text(dir / "m.csv"), "epoch,loss,dice_liver,best,val_seconds\n1,0.5,,1,\n");
  now.append({{"epoch", "2"}, {"loss", "0.3"}, {"dice_liver", "0.8"}, {"best", "1"}, {"val_seconds", "2.5"}});
  EXPECT_EQ(test::read_text(dir / "m.csv"), "epoch,loss,dice_liver,best,val_seconds\n1,0.5,,1,\n2,0.3,0.8,1,2.5\n");
}

TEST(MetricsCsvColumns, AColumnThisRunDoesNotHaveIsStillAnError) {
  test::TempDir dir;
  MetricsCsv old(dir / "m.csv", {"epoch", "loss", "val_mae"});
  old.start_fresh();
  MetricsCsv now(dir / "m.csv", {"epoch", "loss", "val_dice"});
  EXPECT_THROW(now.resume(1), IoError);
}

}  // namespace
}  // namespace u3d
