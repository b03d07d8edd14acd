#include "u3d/train/checkpoint_keeper.h"

#include <spdlog/spdlog.h>

#include "u3d/core/errors.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/signals.h"
#include "u3d/train/resume.h"

namespace u3d {

CheckpointKeeper::CheckpointKeeper(const Config& cfg, const RunPaths& paths)
    : on_error_(cfg.checkpoint.on_error),
      store_(paths.checkpoints, cfg.checkpoint.keep_last),
      cadence_(cfg.checkpoint.every_epochs, cfg.checkpoint.every_minutes, cfg.training.epochs),
      continue_command_(continue_command(cfg) + (launch_env().launched
                                                     ? fmt::format(" (under the same {} launch)", launch_env().launcher)
                                                     : "")) {}

void CheckpointKeeper::at_epoch_end(int64_t epoch, int64_t global_step, bool improved, bool last) {
  if (last || cadence_.due_at_epoch_end(epoch)) commit(store_.periodic_path(epoch), global_step, /*periodic=*/true);
  if (improved) commit(store_.best_path(), global_step, /*periodic=*/false);
}

void CheckpointKeeper::inside_epoch(int64_t epoch, int64_t step_in_epoch, int64_t global_step) {
  commit(store_.step_path(epoch, step_in_epoch), global_step, /*periodic=*/true);
}

void CheckpointKeeper::commit(const std::filesystem::path& path, int64_t global_step, bool periodic) {
  if (!writes_) {  // another rank writes it
    if (periodic) {
      cadence_.mark_saved();
      saved_global_step_ = global_step;
    }
    return;
  }
  bool written = true;
  try {
    writer_(path);
  } catch (const IoError& e) {
    if (on_error_ == SaveErrorPolicy::kStop) throw;
    written = false;
    spdlog::warn(
        "checkpoint not written: {}; training goes on and retries at the next checkpoint "
        "(checkpoint.on_error = continue)",
        e.what());
  }
  if (!periodic) return;  // best.pt: retried at the next improvement
  last_save_failed_ = !written;
  cadence_.mark_saved();
  if (written) {
    saved_global_step_ = global_step;
    store_.prune();  // only after the new checkpoint is committed
  }
}

void CheckpointKeeper::on_stop(const TrainState& state, int signal) {
  if (saved_global_step_ != state.global_step && state.global_step > 0) {
    // Stopped between an epoch's end and its checkpoint cadence.
    commit(store_.periodic_path(state.epoch), state.global_step, /*periodic=*/true);
  }
  if (last_save_failed_) {
    throw IoError(
        fmt::format("stopped by {}, but the checkpoint could not be written (see above); the newest "
                    "intact checkpoint in {} is older",
                    StopSignals::name(signal), store_.dir().string()));
  }
  if (state.global_step == 0) {
    spdlog::info("stopped by {} before the first step; nothing to save", StopSignals::name(signal));
    return;
  }
  const auto latest = store_.latest();
  spdlog::info("stopped by {} at epoch {} step {} (global step {}); checkpoint {} is the newest; continue with: {}",
               StopSignals::name(signal), state.epoch + (state.step_in_epoch > 0 ? 1 : 0), state.step_in_epoch,
               state.global_step, latest ? latest->filename().string() : std::string("?"), continue_command_);
}

void CheckpointKeeper::on_finish() const {
  if (last_save_failed_) {
    throw IoError(
        fmt::format("training finished, but the last checkpoint could not be written (see the warnings "
                    "above); the newest intact checkpoint in {} is older",
                    store_.dir().string()));
  }
}

std::string CheckpointKeeper::last_checkpoint_note() const {
  const auto last = saved_global_step_ >= 0 ? store_.latest() : std::nullopt;
  if (!last) return "no checkpoint was written yet";
  return fmt::format(
      "the last checkpoint {} is intact (continue with: {}; add --set KEY=VALUE --allow-config-change KEY for "
      "settings you change)",
      last->string(), continue_command_);
}

CheckpointCadence::CheckpointCadence(int64_t every_epochs, double every_minutes, int64_t last_epoch)
    : every_epochs_(std::max<int64_t>(1, every_epochs)),
      every_seconds_(every_minutes * 60.0),
      last_epoch_(last_epoch),
      last_save_(std::chrono::steady_clock::now()) {}

bool CheckpointCadence::due_at_epoch_end(int64_t epoch) const {
  return epoch % every_epochs_ == 0 || epoch == last_epoch_;
}

bool CheckpointCadence::due_inside_epoch() const {
  return every_seconds_ > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_).count() >= every_seconds_;
}

void CheckpointCadence::mark_saved() { last_save_ = std::chrono::steady_clock::now(); }

}  // namespace u3d
