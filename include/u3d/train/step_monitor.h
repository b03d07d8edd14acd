// Per-step bookkeeping kept on the device, so the training loop never reads a value back per step:
// the unfinished epoch's sum of finite losses, how many steps were skipped for a non-finite loss or
// gradient norm, and how many were skipped in a row. totals() is the only host read; the loop
// calls it at progress lines, at the end of an epoch, before a checkpoint and every
// training.max_nonfinite_steps steps (to stop a run that keeps producing NaN/Inf).
#pragma once
#include <torch/torch.h>

#include <functional>

#include "u3d/train/checkpoint.h"

namespace u3d {

class StepMonitor {
 public:
  // `terms`: how many loss terms each step reports (training.loss as a list; 0: none).
  explicit StepMonitor(const torch::Device& device, int64_t terms = 0);

  // One step: `loss` () float on the device, `found_inf` () float32 0/1 (nonfinite_flag()),
  // `terms` (T,) float the step's loss terms (undefined when T = 0). A skipped step's loss and
  // terms are left out of the sums.
  void record(const torch::Tensor& loss, const torch::Tensor& found_inf, const torch::Tensor& terms = {});

  struct Totals {
    double loss_sum = 0;            // finite losses of the epoch
    std::vector<double> term_sums;  // the same per loss term
    int64_t skipped = 0;            // skipped steps of the epoch
    int64_t skipped_total = 0;      // skipped steps of the run
    int64_t skipped_in_a_row = 0;   // ending at the last recorded step
    int64_t longest_run = 0;        // longest run of consecutive skips since the last reset
  };
  Totals totals() const;  // host read (synchronises with the device; calls the before-read hook first)
  // Called before each host read: data-parallel training with a CUDA graph bounds the wait for the
  // device there (Distributed::wait_for_device), as no NCCL watchdog watches a replay's collectives.
  void set_before_read(std::function<void()> hook) { before_read_ = std::move(hook); }

  // New epoch: zeroes the epoch sums; the in-a-row counter carries over (a run may span epochs).
  void start_epoch();
  void reset_longest_run();
  // From / into the training state of a checkpoint (the epoch sums and counters).
  void restore(const TrainState& state);
  void store(TrainState& state) const;  // host read

 private:
  std::function<void()> before_read_;
  torch::Tensor loss_sum_;   // () float64
  torch::Tensor term_sums_;  // (T,) float64
  torch::Tensor counters_;   // (4,) int64: skipped (epoch), skipped (run), in a row, longest run
};

}  // namespace u3d
