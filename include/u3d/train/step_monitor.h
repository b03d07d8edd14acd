// Per-step bookkeeping kept on the device, so the training loop never reads a value back per step:
// the unfinished epoch's sum of finite losses, the same per loss term, how many steps were skipped
// for a non-finite loss or gradient norm, and how many were skipped in a row.
//
// Device state: one packed (1 + T + 4,) float64 tensor (T loss terms):
//   [0] loss sum | [1, 1 + T) term sums | skipped (epoch), skipped (run), in a row, longest run.
// The counters are whole numbers in float64 (exact up to 2^53). Every read copies it once.
//
// Two reads:
//   totals()            exact, synchronous: one device-to-host copy (into a page-locked buffer on
//                       CUDA). The loop calls it at the end of an epoch, before a checkpoint and
//                       every training.max_nonfinite_steps steps (to stop a run that keeps
//                       producing NaN/Inf).
//   request()/latest()  the status line's: request() enqueues an asynchronous copy into a second
//                       page-locked buffer and records a CUDA event; latest() returns the newest
//                       snapshot whose copy has completed (the event is queried, never waited
//                       for), so a redraw never synchronises. On the CPU request() reads at once
//                       and latest() is exact.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "u3d/model/checkpoint.h"

namespace u3d {

class StepMonitor {
 public:
  // `terms`: how many loss terms each step reports (training.loss as a list; 0: none).
  explicit StepMonitor(const torch::Device& device, int64_t terms = 0);
  ~StepMonitor();

  // One step: `loss` () float on the device, `found_inf` () float32 0/1 (nonfinite_flag()),
  // `terms` (T,) float the step's loss terms (undefined when T = 0). A skipped step's loss and
  // terms are left out of the sums. In place: a CUDA graph captures it with the step.
  void record(const torch::Tensor& loss, const torch::Tensor& found_inf, const torch::Tensor& terms = {});

  struct Totals {
    double loss_sum = 0;            // finite losses of the epoch
    std::vector<double> term_sums;  // the same per loss term
    int64_t skipped = 0;            // skipped steps of the epoch
    int64_t skipped_total = 0;      // skipped steps of the run
    int64_t skipped_in_a_row = 0;   // ending at the last recorded step
    int64_t longest_run = 0;        // longest run of consecutive skips since the last reset
  };
  // Host read: one copy of the packed state (synchronises with the device; calls the before-read
  // hook first).
  Totals totals() const;
  // Called before each synchronous host read: data-parallel training with a CUDA graph bounds the
  // wait for the device there (Distributed::wait_for_device), as no NCCL watchdog watches a
  // replay's collectives. request() on the CPU is such a read; on CUDA it never waits.
  void set_before_read(std::function<void()> hook) { before_read_ = std::move(hook); }

  // A snapshot for the status line: the totals after `steps` steps of the epoch (the caller's
  // count, handed to request()); steps = 0 and empty totals when none has arrived this epoch.
  struct Snapshot {
    Totals totals;
    int64_t steps = 0;
  };
  // Enqueues a copy of the state as it will be after the steps enqueued so far, tagged `steps`.
  // CUDA: asynchronous (a later request() replaces one still in flight); CPU: read at once.
  void request(int64_t steps);
  // The newest snapshot whose copy has completed; never waits for the device.
  Snapshot latest();

  // New epoch: zeroes the epoch sums; the in-a-row counter carries over (a run may span epochs).
  // Drops the snapshots of the ended epoch.
  void start_epoch();
  void reset_longest_run();
  // From / into the training state of a checkpoint (the epoch sums and counters).
  void restore(const TrainState& state);
  void store(TrainState& state) const;  // host read

 private:
  Totals unpack(const double* values) const;                                  // the packed layout, read on the host
  torch::Tensor loss_sum() const { return state_.select(0, 0); }              // ()
  torch::Tensor term_sums() const { return state_.narrow(0, 1, terms_); }     // (T,)
  torch::Tensor counters() const { return state_.narrow(0, 1 + terms_, 4); }  // (4,)
  void poll();  // takes a completed asynchronous copy into latest_

  std::function<void()> before_read_;
  int64_t terms_;
  torch::Tensor state_;                // (1 + T + 4,) float64 on the device: the packed layout above
  torch::Tensor read_host_;            // CUDA: (1 + T + 4,) float64 page-locked, totals()'s copy
  torch::Tensor async_host_;           // CUDA: the same, request()'s copy
  struct CopyEvent;                    // a CUDA event (step_monitor.cpp)
  std::unique_ptr<CopyEvent> copied_;  // CUDA: recorded after request()'s copy
  bool in_flight_ = false;             // a request()'s copy not taken into latest_ yet
  int64_t in_flight_steps_ = 0;
  int64_t in_flight_epoch_ = 0;  // epoch_ when it was requested
  int64_t epoch_ = 0;            // start_epoch() and restore() calls: a snapshot of an older one is dropped
  Snapshot latest_;
};

}  // namespace u3d
