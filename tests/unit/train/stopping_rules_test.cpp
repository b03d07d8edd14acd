// Stopping rules (train/stopping_rules.h) without a run: which epochs count against
// training.early_stop_patience, and the next epoch's time that training.max_minutes is checked with,
// when training.val_every makes epochs with and without a validation alternate (issue 35).
#include <gtest/gtest.h>

#include "u3d/train/stopping_rules.h"

namespace u3d {
namespace {

// Whole-volume validation every 3 epochs of 12, monitored by val_loss.
ResolvedConfig every_third_epoch() {
  ResolvedConfig rc;
  rc.cfg.training.epochs = 12;
  rc.cfg.training.val_every = 3;
  rc.cfg.training.val_full = true;
  rc.val_ids = {"case_0"};
  rc.monitor = Monitor::kValLoss;
  rc.monitor_name = "val_loss";
  return rc;
}

TEST(StoppingRulesUnit, PatienceCountsOnlyEpochsThatMeasureTheMonitor) {
  ResolvedConfig rc = every_third_epoch();
  rc.cfg.training.early_stop_patience = 2;
  const StoppingRules rules(rc);
  TrainState state;  // no validation yet: best_epoch 0
  for (int64_t epoch : {1, 2, 3, 4, 5}) EXPECT_EQ(rules.after_epoch(epoch, 0, state), "") << epoch;
  EXPECT_NE(rules.after_epoch(6, 0, state).find("early stop: val_loss has not improved for 6 epochs (2 validated"),
            std::string::npos);
  state.best_epoch = 3;
  for (int64_t epoch : {4, 5, 6, 7, 8}) EXPECT_EQ(rules.after_epoch(epoch, 0, state), "") << epoch;
  EXPECT_NE(rules.after_epoch(9, 0, state), "");
  EXPECT_FALSE(rc.monitor_measured(4));
  EXPECT_TRUE(rc.monitor_measured(12));  // the last epoch validates
  // The pseudo-Dice is measured every epoch (val patches).
  rc.monitor = Monitor::kPseudoDiceEma;
  rc.cfg.training.val_patch_batches = 2;
  EXPECT_TRUE(rc.monitor_measured(4));
  EXPECT_NE(StoppingRules(rc).after_epoch(5, 0, state), "");
}

TEST(StoppingRulesUnit, TheNextEpochsTimeAddsAValidationOnlyWhenItValidates) {
  const ResolvedConfig rc = every_third_epoch();
  const StoppingRules rules(rc);
  EXPECT_DOUBLE_EQ(rules.next_epoch_seconds(2, 1.0, 5.0), 6.0);  // epoch 3 validates: 1 s of steps + 5 s
  EXPECT_DOUBLE_EQ(rules.next_epoch_seconds(3, 6.0, 5.0), 1.0);  // epoch 3 did, epoch 4 does not
  EXPECT_DOUBLE_EQ(rules.next_epoch_seconds(4, 1.0, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(rules.next_epoch_seconds(1, 1.0, 0.0), 1.0);   // no validation timed yet
  EXPECT_DOUBLE_EQ(rules.next_epoch_seconds(11, 1.0, 5.0), 6.0);  // the last epoch validates
}

}  // namespace
}  // namespace u3d
