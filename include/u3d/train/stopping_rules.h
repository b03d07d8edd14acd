// When a run ends before training.epochs: training.early_stop_patience epochs without an
// improvement of the monitored value (only epochs that measure it count:
// ResolvedConfig::monitor_measured), or a training.max_minutes budget the next epoch would overrun.
// The count and the clock (TrainState::best_epoch, run_seconds) survive --resume, and a resume with
// nothing left to do says why.
//
//   StoppingRules rules(rc);   // reads rc when asked: resolve() may fill it later
//   if (std::string why = rules.after_epoch(epoch, epoch_seconds, state); !why.empty()) stop(why);
#pragma once
#include <cstdint>
#include <string>

#include "u3d/model/checkpoint.h"
#include "u3d/train/resolve.h"

namespace u3d {

class StoppingRules {
 public:
  explicit StoppingRules(const ResolvedConfig& rc) : rc_(rc) {}

  // Why the run stops after `epoch` although epochs are left: early_stop_patience epochs that
  // measured the monitored value since the best one, or max_minutes that the next epoch (taking
  // `next_epoch_seconds`) would overrun; "" to go on.
  std::string after_epoch(int64_t epoch, double next_epoch_seconds, const TrainState& state) const;
  // The wall time of the epoch after `epoch`, for max_minutes: `epoch_seconds` (this one's)
  // without its whole-volume validation, plus one when the next epoch validates
  // (`validation_seconds`: the last one's; 0 before the first). With training.val_every > 1 the
  // epochs with and without a validation differ, and either may come next.
  double next_epoch_seconds(int64_t epoch, double epoch_seconds, double validation_seconds) const;
  // Why a resumed run at an epoch boundary has nothing to train: every epoch done, or a rule that
  // already holds; "" to train (always "" for a fresh run or a resume inside an epoch).
  std::string nothing_left(const TrainState& state, bool resumed) const;

 private:
  const ResolvedConfig& rc_;
};

}  // namespace u3d
