// The progress of a running epoch as one line: the terminal status line (logging.progress bar,
// redrawn under the log lines by core/logging.h's set_status_line) and the times it shows.
#pragma once
#include <cstdint>
#include <string>

namespace u3d {

// What a run is doing, shown first on the status line: "training", "validating", "checkpointing".
enum class Phase { kTraining, kValidating, kCheckpointing };
const char* phase_name(Phase phase);

// The numbers of one progress report inside an epoch (a status-line redraw or a progress line).
struct Progress {
  Phase phase = Phase::kTraining;
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch (validating: val cases done)
  double elapsed = 0;           // seconds since the phase began in this process (tqdm's elapsed)
  double loss = 0, lr = 0;
  double samples_per_second = 0;
  double steps_per_second = 0;
  double data_share = 0;        // waiting for batches / elapsed
  double gpu_busy = -1;         // GPU busy share of the steps so far (train/gpu_busy.h); < 0: not on a GPU
  double seconds_left = 0;      // estimated, to the epoch's end
  double run_seconds_left = 0;  // estimated, to the run's end: steps, validations and checkpoints as measured
  int64_t skipped = 0;          // steps skipped (NaN/Inf) so far in the epoch
  int64_t gpu_bytes = -1;       // GPU memory held by the caching allocator (reserved); -1: not on a GPU
  int64_t gpu_total = 0;        // the GPU's memory; 0: unknown
};

// The status line of logging.progress bar, cut to `columns`, with tqdm's [elapsed<remaining, rate]:
// "training epoch 3/100 [#######-----]  45% 120/266 [00:37<00:45,  3.21it/s] | run ETA 4:10:07 | loss 0.45210 |
//  lr 1.00e-03 | data 3% | gpu 97% | GPU 41.2/79.6 GiB" (no gpu share when p.gpu_busy < 0, no GPU memory
//  when p.gpu_bytes < 0);
// "validating epoch 3/100 [###---]  40% 2/5 [00:03<00:04,  1.52s/it] | run ETA 4:10:07" (val cases, or
// val patch batches); "checkpointing epoch 3/100 | run ETA 4:10:07". `steps`: the phase's total.
std::string progress_bar_line(const Progress& p, int64_t epochs, int64_t steps, int columns);
// tqdm's format_interval: "01:02" under an hour, "1:02:03" above (whole seconds, truncated);
// "?" for a negative or non-finite time.
std::string tqdm_interval(double seconds);
// tqdm's rate ("{:5.2f}"): " 3.21it/s" at or above 1 it/s, " 1.52s/it" below, "?it/s" when unknown.
std::string tqdm_rate(double per_second);
// "1:02:03", "4:05" (minutes:seconds under an hour), "--" for a negative or non-finite time.
std::string clock_text(double seconds);

}  // namespace u3d
