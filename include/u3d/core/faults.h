// Test-only fault injection, in one place: the environment variable U3D_TEST_FAULTS, a comma list
// of KIND@VALUE items, read when a collaborator is built (docs/reliability.md, "Test-only hooks").
// Unset in normal runs; a malformed item is a UsageError naming it (exit 2).
//
//   nan_batch@5            a NaN voxel in the batch of step 5 (steps count from 1, as metrics.csv's)
//   inf_grad@7-9           an Inf in a gradient in steps 7 to 9 (forces eager steps)
//   nan_val@2              a NaN validation result in epoch 2
//   stop_micro@3           the process sends itself SIGTERM when it draws its 3rd micro-batch
//                          (training.accumulate_steps; counted from 1 over the process): a stop
//                          signal in the middle of an accumulated step
//   slow_val@MS            MS ms before each validation case (to signal a run inside validation)
//   slow_step@MS           MS ms of sleep, deaf to signals, as each micro-batch is drawn: a training
//                          step that takes long (a large patch on a slow device)
//   checkpoint_delay@MS    MS ms after each 64 KiB of a checkpoint write and between its protocol
//                          steps (to kill a process inside a write)
//   sampler_case@ID        filling a sample from case ID fails with a DataError
//
// Built with -DU3D_FAULT_INJECTION=OFF (the default when the tests are not built), from_env()
// ignores the variable and every hook is dead code the compiler removes.
#pragma once
#include <cstdint>
#include <set>
#include <string>

namespace u3d {

#ifdef U3D_FAULT_INJECTION
inline constexpr bool kFaultInjection = true;
#else
inline constexpr bool kFaultInjection = false;
#endif

struct TestFaults {
  std::set<int64_t> nan_batch, inf_grad, nan_val;  // global steps (from 1) / epochs
  std::set<int64_t> stop_micro;                    // micro-batches drawn by the process (from 1)
  int64_t slow_val_ms = 0;
  int64_t slow_step_ms = 0;
  int64_t checkpoint_delay_ms = 0;
  std::string sampler_case;

  bool any() const {
    return kFaultInjection && (!nan_batch.empty() || !inf_grad.empty() || !nan_val.empty() || !stop_micro.empty() ||
                               slow_val_ms > 0 || slow_step_ms > 0 || checkpoint_delay_ms > 0 || !sampler_case.empty());
  }
  // The set U3D_TEST_FAULTS describes now (empty when unset or compiled out); logs a warning once
  // per process when it is active.
  static TestFaults from_env();
  static TestFaults parse(const std::string& text);
};

}  // namespace u3d
