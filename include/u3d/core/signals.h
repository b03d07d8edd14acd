// Graceful stop on SIGINT, SIGTERM and SIGHUP.
//
//   StopSignals guard;                        // installs the handlers; restores the old ones on exit
//   ... after each training step:
//   if (int sig = StopSignals::pending()) { write a checkpoint; return 128 + sig; }
//
// The first signal is answered at once, from the handler itself, with one line on stderr saying what
// happens next ("[trainer] SIGINT received: <what_next>"), then recorded: the training loop finishes
// its step, writes a checkpoint,
// flushes metrics.csv and the log, and the process exits with 128 + signal (130 for SIGINT, 143
// for SIGTERM, 129 for SIGHUP). A second signal prints a note on stderr and changes nothing (the
// checkpoint being written is committed atomically either way). A third exits at once with
// 128 + the first signal; the newest committed checkpoint is intact, the temporary file of the
// write in progress is removed at the next start.
//
// SIGHUP stays ignored when the process started with it ignored (nohup). SIGPIPE is ignored, so a
// console pipe that closes (`trainer ... | tee log` with tee killed) does not end the run; output
// still goes to train.log.
//
// Commands without checkpoints (synth, import, predict-only) install the same guard and call
// throw_if_stopped() between cases: the staged output is removed as the exception unwinds, one line
// is printed and the exit code is 128 + signal.
#pragma once
#include <string>

namespace u3d {

class StopSignals {
 public:
  // what_next: the first signal's answer; a string literal (kept, not copied).
  explicit StopSignals(const char* what_next = "stopping before the next case; partial outputs are removed");
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since the guard was installed, or 0. Lock-free; any thread.
  static int pending();
  // Short name: "SIGTERM".
  static const char* name(int signal);
  // StoppedError "<output>: stopped by SIGTERM; nothing written (the partial file was removed)" when a
  // stop signal is pending; nothing otherwise.
  static void throw_if_stopped(const std::string& output);

 private:
  struct Saved;
  Saved* saved_;
};

}  // namespace u3d
