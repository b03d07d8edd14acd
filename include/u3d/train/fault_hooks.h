// The tests' faults inside a training run, in one object: the trainer calls it at its fault points
// (a drawn micro-batch, the step's backward, the choice of a captured sampler) and hands its
// TestFaults to validation. U3D_TEST_FAULTS (core/faults.h, docs/reliability.md "Test-only hooks")
// is read once, when the hooks are made; in normal runs every call does nothing.
//
//   FaultHooks faults;                      // Trainer's member
//   faults.arm(step, state);                // inf_grad@N
//   faults.on_batch(batch, m, step + 1);    // nan_batch@N, stop_micro@N
#pragma once
#include <cstdint>

#include "u3d/core/faults.h"
#include "u3d/data/batch.h"
#include "u3d/model/checkpoint.h"
#include "u3d/train/train_step.h"

namespace u3d {

class FaultHooks {
 public:
  FaultHooks() : faults_(TestFaults::from_env()) {}

  const TestFaults& faults() const { return faults_; }  // validation's (nan_val, slow_val)
  // Whether any fault is set: GPU sampling then stays out of the CUDA graph.
  bool active() const { return faults_.any(); }
  // inf_grad@N: an Inf in the first parameter's gradient in global step N (counted from 1; `state`
  // is read when the hook runs). Forces eager steps; nothing without the fault.
  void arm(TrainStep& step, const TrainState& state) const;
  // Micro-batch `m` of the step that will be global step `global_step`, just drawn: nan_batch@N
  // puts a NaN in its first micro-batch's image (a copy); stop_micro@N sends SIGTERM when the
  // process draws its Nth micro-batch; slow_step@MS sleeps MS ms (signals do not cut it short).
  void on_batch(Batch& batch, int64_t m, int64_t global_step);

 private:
  TestFaults faults_;
  int64_t micro_batches_ = 0;  // drawn by this process
};

}  // namespace u3d
