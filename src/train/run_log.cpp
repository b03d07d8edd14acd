#include "u3d/train/run_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "u3d/core/version.h"

namespace u3d {
namespace {

std::string fmt_metric(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

}  // namespace

RunLog::RunLog(const ResolvedConfig& rc, const RunPaths& paths) : rc_(rc), paths_(paths) {
  std::vector<std::string> columns = {
      "epoch", "step",          "lr",           "train_loss", "val_loss",           rc.metric.name,
      "best",  "epoch_seconds", "data_seconds", "data_share", "samples_per_second", "skipped_steps"};
  if (rc.validates_patches()) columns.insert(columns.begin() + 6, {"val_pseudo_dice", "val_pseudo_dice_ema"});
  if (rc.scores_dose())
    columns.insert(std::find(columns.begin(), columns.end(), "best"), {"val_dose_score", "val_dvh_score"});
  csv_ = std::make_unique<MetricsCsv>(paths.metrics, columns);
  if (rc.cfg.logging.step_log) {
    step_csv_ = std::make_unique<MetricsCsv>(
        paths.root / "steps.csv", std::vector<std::string>{"step", "epoch", "step_in_epoch", "lr", "loss", "skipped"});
  }
}

void RunLog::begin(const std::optional<TrainState>& resumed) {
  if (resumed) {
    csv_->resume(resumed->epoch);
    if (step_csv_) step_csv_->resume(resumed->global_step);
  } else {
    csv_->start_fresh();
    if (step_csv_) step_csv_->start_fresh();
  }
}

void RunLog::banner(const Runtime& runtime, int64_t parameters, const std::string& loss) const {
  spdlog::info("trainer {} ({}), LibTorch {}, device {}, {} threads", version(), git_commit(), TORCH_VERSION,
               runtime.device.str(), runtime.threads);
  const auto& cfg = rc_.cfg;
  const int64_t micro = cfg.training.accumulate_steps;
  spdlog::info("model: {} with {} trainable parameters{}; loss {}; {} steps per epoch of {} samples{}",
               to_string(cfg.model.architecture), parameters,
               cfg.model.activation_checkpointing == Checkpointing::kOff
                   ? ""
                   : fmt::format(", activation checkpointing ({})", to_string(cfg.model.activation_checkpointing)),
               loss, rc_.steps_per_epoch, cfg.data.batch_size * micro,
               micro > 1
                   ? fmt::format(" ({} micro-batches of {} accumulated per optimizer step)", micro, cfg.data.batch_size)
                   : "");
  spdlog::info("resolved config (also in {}):\n{}", paths_.config.string(), describe(rc_.cfg));
}

bool RunLog::progress_due() const {
  const double every = rc_.cfg.logging.progress_seconds;
  return every > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress_).count() >= every;
}

void RunLog::progress(const Progress& p) {
  last_progress_ = std::chrono::steady_clock::now();
  spdlog::info(
      "epoch {}/{} step {}/{} loss {:.5f} lr {:.3g} {:.1f} samples/s, data wait {:.0f}%, epoch ends in {:.0f} "
      "s{}",
      p.epoch, rc_.cfg.training.epochs, p.step, rc_.steps_per_epoch, p.loss, p.lr, p.samples_per_second,
      100.0 * p.data_share, p.seconds_left,
      p.skipped > 0 ? fmt::format(", {} steps skipped (NaN/Inf)", p.skipped) : "");
}

void RunLog::step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, double lr, const torch::Tensor& loss,
                  const torch::Tensor& found_inf) {
  if (!step_csv_) return;
  const float value = loss.item<float>();  // debugging aid: one host read per step
  const bool skipped = found_inf.item<float>() > 0;
  step_csv_->append({{"step", std::to_string(global_step)},
                     {"epoch", std::to_string(epoch)},
                     {"step_in_epoch", std::to_string(step_in_epoch)},
                     {"lr", fmt::format("{:.9g}", lr)},
                     {"loss", fmt::format("{:.9g}", value)},
                     {"skipped", skipped ? "1" : "0"}});
}

void RunLog::epoch(int64_t epoch, int64_t global_step, const EpochStats& train, const std::optional<ValStats>& val,
                   bool improved, double lr) {
  const double sps = train.seconds > 0 ? static_cast<double>(train.samples) / train.seconds : 0;
  const double data_share = train.seconds > 0 ? train.data_seconds / train.seconds : 0.0;
  auto value = [&](double ValStats::*field) { return val ? fmt_metric((*val).*field) : std::string(); };
  csv_->append({{"epoch", std::to_string(epoch)},
                {"step", std::to_string(global_step)},
                {"lr", fmt::format("{:.6g}", lr)},
                {"train_loss", fmt_metric(train.train_loss)},
                {"val_loss", value(&ValStats::loss)},
                {rc_.metric.name, value(&ValStats::metric)},
                {"val_dose_score", value(&ValStats::dose_score)},
                {"val_dvh_score", value(&ValStats::dvh_score)},
                {"val_pseudo_dice", value(&ValStats::pseudo_dice)},
                {"val_pseudo_dice_ema", value(&ValStats::pseudo_dice_ema)},
                {"best", improved ? "1" : "0"},
                {"epoch_seconds", fmt::format("{:.3f}", train.seconds)},
                {"data_seconds", fmt::format("{:.3f}", train.data_seconds)},
                {"data_share", fmt::format("{:.4f}", data_share)},
                {"samples_per_second", fmt::format("{:.3f}", sps)},
                {"skipped_steps", std::to_string(train.skipped)}});
  const std::string timing = fmt::format("{:.1f} s, {:.1f} samples/s, data wait {:.1f} s ({:.0f}%)", train.seconds, sps,
                                         train.data_seconds, 100.0 * data_share);
  if (val) {
    const std::string dose =
        rc_.scores_dose() ? fmt::format(" val_dose_score {:.4f} val_dvh_score {:.4f}", val->dose_score, val->dvh_score)
                          : "";
    const std::string pseudo = std::isfinite(val->pseudo_dice) ? fmt::format(" pseudo_dice {:.4f} (ema {:.4f})",
                                                                             val->pseudo_dice, val->pseudo_dice_ema)
                                                               : "";
    const std::string metric =
        std::isfinite(val->metric) ? fmt::format(" {} {:.4f}", rc_.metric.name, val->metric) : "";
    spdlog::info("epoch {}/{}: train_loss {:.5f} val_loss {:.5f}{}{}{}{} | {}", epoch, rc_.cfg.training.epochs,
                 train.train_loss, val->loss, metric, dose, pseudo, improved ? " (best)" : "", timing);
  } else {
    spdlog::info("epoch {}/{}: train_loss {:.5f} | {}", epoch, rc_.cfg.training.epochs, train.train_loss, timing);
  }
  flush_logs();
}

void RunLog::done(const TrainState& state) const {
  spdlog::info("done: {} epochs, {} steps; best {} {} at epoch {}; run folder {}", state.epoch, state.global_step,
               rc_.monitor_name, fmt_metric(state.best_metric), state.best_epoch, paths_.root.string());
  flush_logs();
}

}  // namespace u3d
