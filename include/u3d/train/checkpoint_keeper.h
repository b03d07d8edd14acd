// When and what the training loop checkpoints, and what happens when a write fails: the policy on
// top of CheckpointStore's crash-safe commit (checkpoint.h).
//
//   epoch end       epoch_NNNN.pt every checkpoint.every_epochs epochs and after the last one,
//                   then the oldest beyond checkpoint.keep_last are pruned; best.pt on improvement
//   inside epochs   epoch_NNNN_step_SSSSSS.pt once checkpoint.every_minutes have passed, and at a
//                   stop signal
//   a failed write  checkpoint.on_error = stop: the IoError ends the run; continue: a warning, and
//                   the next checkpoint retries; a run that ends (or stops) with its last write
//                   failed still ends with an IoError naming the newest intact checkpoint
//
// The keeper does not know how to snapshot a run: the trainer gives it a Writer that saves the
// model, optimizer and training state to a path (save_checkpoint()).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "u3d/core/config.h"
#include "u3d/core/run.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"

namespace u3d {

// When the training loop writes checkpoints: at the end of every checkpoint.every_epochs-th epoch
// and of the last one, and inside an epoch once checkpoint.every_minutes (when > 0) have passed
// since the last checkpoint. Host clock only; no device work.
class CheckpointCadence {
 public:
  CheckpointCadence(int64_t every_epochs, double every_minutes, int64_t last_epoch);
  bool due_at_epoch_end(int64_t epoch) const;
  bool due_inside_epoch() const;  // wall-clock cadence
  void mark_saved();              // restarts the wall clock

 private:
  int64_t every_epochs_;
  double every_seconds_;
  int64_t last_epoch_;
  std::chrono::steady_clock::time_point last_save_;
};

class CheckpointKeeper {
 public:
  using Writer = std::function<void(const std::filesystem::path&)>;
  CheckpointKeeper(const Config& cfg, const RunPaths& paths);

  const CheckpointStore& store() const { return store_; }
  void set_writer(Writer writer) { writer_ = std::move(writer); }
  // false on data-parallel ranks other than 0: the same decisions and bookkeeping, no file touched.
  void set_writes(bool writes) { writes_ = writes; }
  // A resumed run: the checkpoint it continues from is the newest one written at `global_step`.
  void resumed_at(int64_t global_step) { saved_global_step_ = global_step; }

  // After epoch `epoch` (ending at `global_step`): the periodic checkpoint when due or when `last`
  // (a stopping rule ends the run there), best.pt when improved.
  void at_epoch_end(int64_t epoch, int64_t global_step, bool improved, bool last = false);
  // Whether the wall-clock cadence (checkpoint.every_minutes) asks for a checkpoint now.
  bool due_inside_epoch() const { return cadence_.due_inside_epoch(); }
  // A checkpoint inside epoch `epoch` after `step_in_epoch` steps.
  void inside_epoch(int64_t epoch, int64_t step_in_epoch, int64_t global_step);
  // The run was stopped by `signal` (StopSignals): writes the checkpoint of `state` unless the
  // newest already holds it, logs the exact command that continues the run (continue_command,
  // resume.h: the run's --config and --set overrides, then --resume), and throws IoError when that
  // write failed.
  void on_stop(const TrainState& state, int signal);
  // The run finished: IoError when the last periodic checkpoint could not be written.
  void on_finish() const;
  // For error messages: which checkpoint is intact and how to continue from it.
  std::string last_checkpoint_note() const;

 private:
  // Writes `path`; periodic: also prunes and restarts the wall-clock cadence.
  void commit(const std::filesystem::path& path, int64_t global_step, bool periodic);

  SaveErrorPolicy on_error_;
  CheckpointStore store_;
  CheckpointCadence cadence_;
  Writer writer_;
  int64_t saved_global_step_ = -1;  // global step of the newest committed periodic checkpoint
  bool last_save_failed_ = false;
  bool writes_ = true;
  std::string continue_command_;  // what the stop messages print (resume.h)
};

}  // namespace u3d
