#include "u3d/train/run_monitoring.h"

namespace u3d {

RunLogSettings run_log_settings(const ResolvedConfig& rc) {
  RunLogSettings s;
  s.cfg = rc.cfg;
  s.metric_name = rc.metric.name;
  s.monitor_name = rc.monitor_name;
  s.validates_patches = rc.validates_patches();
  s.scores_dose = rc.scores_dose();
  s.labels = rc.task() == Task::kSegmentation;
  s.num_classes = rc.info.num_classes;
  s.class_names = rc.info.class_names;
  s.full_validation_due = [rc](int64_t epoch) { return rc.full_validation_due(epoch); };
  s.steps_per_epoch = rc.steps_per_epoch;
  s.world_size = rc.world_size;
  return s;
}

RunPosition run_position(const TrainState& state) {
  return RunPosition{state.epoch, state.global_step, state.best_metric, state.best_epoch};
}

}  // namespace u3d
