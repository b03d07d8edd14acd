// Training's side of monitor/: what the run log (monitor/run_log.h) is told of the resolved config
// and of the training state, so monitor/ needs nothing of training.
//
//   RunLog log(run_log_settings(rc), paths);
//   log.begin(run_position(state));   // at a resume
#pragma once
#include "u3d/model/checkpoint.h"
#include "u3d/monitor/run_log.h"
#include "u3d/train/resolve.h"

namespace u3d {

// The config, the metric and monitor columns, the validations that run, the task's label range,
// steps per epoch and world size of `rc`.
RunLogSettings run_log_settings(const ResolvedConfig& rc);
// Epoch, global step and best value of `state`.
RunPosition run_position(const TrainState& state);

}  // namespace u3d
