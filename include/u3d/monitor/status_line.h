// The progress of a running epoch as one line: the terminal status line (logging.progress bar,
// redrawn under the log lines by core/logging.h's set_status_line) and the times it shows.
#pragma once
#include <cstdint>
#include <string>

namespace u3d {

// The numbers of one progress report inside an epoch (a status-line redraw or a progress line).
struct Progress {
  int64_t epoch = 0, step = 0;  // step: steps done in the epoch
  double loss = 0, lr = 0;
  double samples_per_second = 0;
  double steps_per_second = 0;
  double data_share = 0;        // waiting for batches / elapsed
  double seconds_left = 0;      // estimated, to the epoch's end
  double run_seconds_left = 0;  // estimated, to the run's end (training steps only, validation not counted)
  int64_t skipped = 0;          // steps skipped (NaN/Inf) so far in the epoch
  int64_t gpu_bytes = -1;       // GPU memory held by the caching allocator (reserved); -1: not on a GPU
  int64_t gpu_total = 0;        // the GPU's memory; 0: unknown
};

// The status line of logging.progress bar, cut to `columns`:
// "epoch 3/100 [#######-----]  45% 120/266 | 3.21 it/s | ETA 0:45 run 4:10:07 | loss 0.45210 | lr 1.00e-03 |
//  data 3% | GPU 41.2/79.6 GiB" (no GPU part when p.gpu_bytes < 0).
std::string progress_bar_line(const Progress& p, int64_t epochs, int64_t steps, int columns);
// "1:02:03", "4:05" (minutes:seconds under an hour), "--" for a negative or non-finite time.
std::string clock_text(double seconds);

}  // namespace u3d
