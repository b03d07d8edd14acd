#include "u3d/monitor/run_log.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"
#include "u3d/core/thread_budget.h"

#include "u3d/core/version.h"
#include "u3d/monitor/progress_plot.h"
#include "u3d/monitor/tensorboard.h"

namespace u3d {
namespace {

std::string fmt_metric(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

// A (H, W) float slice as an 8-bit gray PNG, scaled from [lo, hi] (its own range when lo == hi).
std::string slice_png(const torch::Tensor& slice, double lo, double hi) {
  torch::Tensor s = slice.to(torch::kFloat).nan_to_num(0.0);
  if (!(hi > lo)) {
    lo = s.min().item<double>();
    hi = s.max().item<double>();
  }
  const double range = hi > lo ? hi - lo : 1.0;
  const torch::Tensor gray = ((s - lo) / range * 255.0).clamp(0, 255).round().to(torch::kUInt8).contiguous();
  return encode_png(gray.data_ptr<uint8_t>(), static_cast<int>(gray.size(0)), static_cast<int>(gray.size(1)),
                    /*channels=*/1);
}

// Seconds since this process started (Linux: /proc/self/stat's start time against /proc/uptime, so
// the dynamic loading of LibTorch counts too); NaN where they cannot be read.
double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t comm_end = text.rfind(')');  // the command name may hold spaces
  double up = 0;
  if (comm_end == std::string::npos || !(uptime >> up)) return std::nan("");
  std::istringstream fields(text.substr(comm_end + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {  // field 22: starttime, clock ticks after boot
    if (i == 22) return up - std::stod(field) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return std::nan("");
}

}  // namespace

RunLog::RunLog(RunLogSettings settings, const RunPaths& paths) : settings_(std::move(settings)), paths_(paths) {
  const RunLogSettings& rc = settings_;
  switch (rc.cfg.logging.progress) {
    case ProgressMode::kAuto: (console_is_terminal() ? bar_ : lines_) = true; break;
    case ProgressMode::kBar: bar_ = true; break;
    case ProgressMode::kLines: lines_ = true; break;
    case ProgressMode::kOff: break;
  }
  std::vector<std::string> columns = {
      "epoch",         "step",        "lr",           "train_loss", "val_loss", rc.metric_name,       "best",
      "epoch_seconds", "val_seconds", "data_seconds", "data_share", "gpu_busy", "samples_per_second", "skipped_steps"};
  if (rc.validates_patches) {
    std::vector<std::string> pseudo = {"val_pseudo_dice", "val_pseudo_dice_ema"};
    for (const auto& c : dice_columns()) pseudo.push_back(c);
    columns.insert(columns.begin() + 6, pseudo.begin(), pseudo.end());
  }
  if (rc.scores_dose)
    columns.insert(std::find(columns.begin(), columns.end(), "best"), {"val_dose_score", "val_dvh_score"});
  std::vector<std::string> terms;  // training.loss as a list: each term's epoch mean after train_loss
  for (const auto& t : rc.cfg.training.loss.terms) terms.push_back("loss_" + t.name);
  columns.insert(columns.begin() + 4, terms.begin(), terms.end());
  csv_ = std::make_unique<MetricsCsv>(paths.metrics, columns);
  if (rc.cfg.logging.step_log) {
    step_csv_ = std::make_unique<MetricsCsv>(
        paths.root / "steps.csv", std::vector<std::string>{"step", "epoch", "step_in_epoch", "lr", "loss", "skipped"});
  }
}

RunLog::~RunLog() = default;

std::vector<std::string> RunLog::dice_columns() const {
  std::vector<std::string> columns;
  if (!settings_.labels) return columns;
  const auto& names = settings_.class_names;
  for (int64_t c = 1; c < settings_.num_classes; ++c) {
    const auto i = static_cast<size_t>(c);
    const bool named = i < names.size() && !names[i].empty();
    columns.push_back("dice_" + (named ? names[i] : std::to_string(c)));
  }
  return columns;
}

double RunLog::run_seconds_left(int64_t epoch, double epoch_left, bool after_validation) const {
  const auto& full_due = settings_.full_validation_due;
  auto after = [&](int64_t e) {  // the measured validation and checkpoint that follow epoch e
    const bool full = full_due && full_due(e);
    const double val = full ? full_val_seconds_ : settings_.validates_patches ? patch_val_seconds_ : 0.0;
    return val + checkpoint_seconds_;
  };
  double left = std::max(0.0, epoch_left) + (after_validation ? checkpoint_seconds_ : after(epoch));
  const int64_t epochs = settings_.cfg.training.epochs;
  const double per_epoch =
      std::isfinite(step_seconds_) ? step_seconds_ * static_cast<double>(settings_.steps_per_epoch) : 0;
  for (int64_t e = epoch + 1; e <= epochs; ++e) left += per_epoch + after(e);
  return left;
}

void RunLog::validation_progress(int64_t epoch, int64_t done, int64_t total) {
  if (done == 0) phase_started_ = std::chrono::steady_clock::now();
  if (!bar_ || (done > 0 && done < total && !progress_due())) return;
  Progress p;
  p.phase = Phase::kValidating;
  p.epoch = epoch;
  p.step = done;
  p.elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_started_).count();
  p.steps_per_second = done > 0 && p.elapsed > 0 ? static_cast<double>(done) / p.elapsed : 0;
  // Before the first case: the last validation's time; then this one's rate.
  const double per_case = done > 0 ? p.elapsed / static_cast<double>(done)
                                   : (total > 0 ? full_val_seconds_ / static_cast<double>(total) : 0.0);
  p.seconds_left = done > 0 || full_val_seconds_ > 0 ? per_case * static_cast<double>(total - done) : -1;
  p.run_seconds_left =
      std::max(0.0, p.seconds_left) + patch_val_seconds_ + run_seconds_left(epoch, 0, /*after_validation=*/true);
  last_progress_ = std::chrono::steady_clock::now();
  set_status_line(progress_bar_line(p, settings_.cfg.training.epochs, total, console_columns()));
}

void RunLog::checkpointing(int64_t epoch) {
  phase_started_ = std::chrono::steady_clock::now();
  if (!bar_) return;
  Progress p;
  p.phase = Phase::kCheckpointing;
  p.epoch = epoch;
  p.run_seconds_left = run_seconds_left(epoch, 0, /*after_validation=*/true);
  last_progress_ = std::chrono::steady_clock::now();
  set_status_line(progress_bar_line(p, settings_.cfg.training.epochs, 0, console_columns()));
}

void RunLog::validated(bool full, double seconds) { (full ? full_val_seconds_ : patch_val_seconds_) = seconds; }

void RunLog::checkpointed(double seconds) { checkpoint_seconds_ = seconds; }

void RunLog::begin(const std::optional<RunPosition>& resumed) {
  if (settings_.cfg.logging.tensorboard) {
    tb_ = std::make_unique<TensorBoardWriter>(paths_.root / "tensorboard");  // IoError naming the folder
    tb_->session_start(resumed ? resumed->global_step + 1 : 0);
  }
  if (resumed) {
    csv_->resume(resumed->epoch);
    if (step_csv_) step_csv_->resume(resumed->global_step);
  } else {
    csv_->start_fresh();
    if (step_csv_) step_csv_->start_fresh();
  }
}

void RunLog::banner(const Runtime& runtime, int64_t parameters, const std::string& loss) const {
  spdlog::info("trainer {} ({}), LibTorch {}, device {}", version(), git_commit(), TORCH_VERSION, runtime.device.str());
  const auto& cfg = settings_.cfg;
  const ThreadBudget threads = thread_budget(cfg, runtime.device.is_cuda());
  spdlog::info("{}", threads.line());
  if (!threads.warning().empty()) spdlog::warn("{}", threads.warning());
  const int64_t micro = cfg.training.accumulate_steps;
  spdlog::info(
      "model: {} with {} trainable parameters{}; loss {}; {} steps per epoch of {} samples{}{}",
      to_string(cfg.model.architecture), parameters,
      cfg.model.activation_checkpointing == Checkpointing::kOff
          ? ""
          : fmt::format(", activation checkpointing ({})", to_string(cfg.model.activation_checkpointing)),
      loss, settings_.steps_per_epoch, cfg.data.batch_size * micro,
      micro > 1 ? fmt::format(" ({} micro-batches of {} accumulated per optimizer step)", micro, cfg.data.batch_size)
                : "",
      settings_.world_size > 1 ? fmt::format(" per rank, {} over {} ranks",
                                             cfg.data.batch_size * micro * settings_.world_size, settings_.world_size)
                               : "");
  // The settings that differ from the defaults; every key is in config.yaml (and at logging.level debug).
  const auto changed = diff(Config{}, settings_.cfg);
  spdlog::info("resolved config in {}; {} setting(s) differ from the defaults{}{}", paths_.config.string(),
               changed.size(), changed.empty() ? "" : ":\n  ", fmt::join(changed, "\n  "));
  spdlog::debug("resolved config, every key:\n{}", describe(settings_.cfg));
}

bool RunLog::progress_due() const {
  constexpr double kRedrawSeconds = 0.25;
  const double seconds = settings_.cfg.logging.progress_seconds;
  const double every = bar_     ? (seconds > 0 ? std::min(seconds, kRedrawSeconds) : kRedrawSeconds)
                       : lines_ ? seconds
                                : 0.0;
  return every > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress_).count() >= every;
}

void RunLog::progress(const EpochPosition& at, const torch::Device& device) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_started_).count();
  const double per_step = elapsed / static_cast<double>(at.step - first_step_);
  const int64_t steps = settings_.steps_per_epoch;
  Progress p;
  p.epoch = at.epoch;
  p.step = at.step;
  p.loss = at.loss;
  p.lr = at.lr;
  p.samples_per_second = static_cast<double>(at.samples) / elapsed;
  p.steps_per_second = 1.0 / per_step;
  p.data_share = at.data_seconds / elapsed;
  p.gpu_busy = std::isfinite(at.gpu_busy) ? at.gpu_busy : -1.0;
  p.elapsed = elapsed;
  p.seconds_left = per_step * static_cast<double>(steps - at.step);
  step_seconds_ = per_step;
  p.run_seconds_left = run_seconds_left(at.epoch, p.seconds_left, /*after_validation=*/false);
  p.skipped = at.skipped;
  p.gpu_bytes = gpu_memory_in_use(device, &p.gpu_total);
  progress(p);
}

void RunLog::progress(const Progress& p) {
  last_progress_ = std::chrono::steady_clock::now();
  if (bar_) {
    set_status_line(progress_bar_line(p, settings_.cfg.training.epochs, settings_.steps_per_epoch, console_columns()));
    return;
  }
  spdlog::info(
      "epoch {}/{} step {}/{} [{}<{}, {}] loss {:.5f} lr {:.3g} {:.1f} samples/s, data wait {:.0f}%{}, run ETA "
      "{}{}",
      p.epoch, settings_.cfg.training.epochs, p.step, settings_.steps_per_epoch, tqdm_interval(p.elapsed),
      tqdm_interval(p.seconds_left), tqdm_rate(p.steps_per_second), p.loss, p.lr, p.samples_per_second,
      100.0 * p.data_share, p.gpu_busy >= 0 ? fmt::format(", gpu {:.0f}%", 100.0 * p.gpu_busy) : "",
      clock_text(p.run_seconds_left), p.skipped > 0 ? fmt::format(", {} steps skipped (NaN/Inf)", p.skipped) : "");
}

void RunLog::clear_progress() const {
  if (bar_) set_status_line("");
}

void RunLog::step(int64_t global_step, int64_t epoch, int64_t step_in_epoch, double lr, const torch::Tensor& loss,
                  const torch::Tensor& found_inf) {
  const int64_t every = settings_.cfg.logging.tensorboard_steps;
  const bool tb_due = tb_ && every > 0 && global_step % every == 0;
  if (before_read_ && (tb_due || step_csv_)) before_read_();
  if (tb_due) {
    try {
      tb_->add_scalars(global_step, {{"step/train_loss", loss.item<double>()}, {"step/lr", lr}});
    } catch (const std::exception& e) {
      view_failed("TensorBoard", e);
    }
  }
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
  const double val_seconds = val ? val->seconds : 0.0;
  const double gpu_busy = gpu_busy_share(train.time, val_seconds);  // NaN on the CPU: an empty column
  auto value = [&](double ValStats::*field) { return val ? fmt_metric((*val).*field) : std::string(); };
  std::map<std::string, std::string> row = {
      {"epoch", std::to_string(epoch)},
      {"step", std::to_string(global_step)},
      {"lr", fmt::format("{:.6g}", lr)},
      {"train_loss", fmt_metric(train.train_loss)},
      {"val_loss", value(&ValStats::loss)},
      {settings_.metric_name, value(&ValStats::metric)},
      {"val_dose_score", value(&ValStats::dose_score)},
      {"val_dvh_score", value(&ValStats::dvh_score)},
      {"val_pseudo_dice", value(&ValStats::pseudo_dice)},
      {"val_pseudo_dice_ema", value(&ValStats::pseudo_dice_ema)},
      {"best", improved ? "1" : "0"},
      {"epoch_seconds", fmt::format("{:.3f}", train.seconds)},
      {"val_seconds", val ? fmt::format("{:.3f}", val->seconds) : std::string()},
      {"data_seconds", fmt::format("{:.3f}", train.data_seconds)},
      {"data_share", fmt::format("{:.4f}", data_share)},
      {"gpu_busy", fmt_metric(gpu_busy)},
      {"samples_per_second", fmt::format("{:.3f}", sps)},
      {"skipped_steps", std::to_string(train.skipped)},
  };
  const auto& terms = settings_.cfg.training.loss.terms;
  for (size_t i = 0; i < terms.size(); ++i) {
    row["loss_" + terms[i].name] = i < train.term_losses.size() ? fmt_metric(train.term_losses[i]) : std::string();
  }
  const auto dice = dice_columns();
  for (size_t i = 0; i < dice.size() && val; ++i) {
    row[dice[i]] = i < val->pseudo_dice_per_class.size() ? fmt_metric(val->pseudo_dice_per_class[i]) : std::string();
  }
  csv_->append(row);
  epoch_views(global_step, row, val);
  clear_progress();
  const std::string idle = gpu_idle_note(train.time, val_seconds);  // what the rest was, when the share is low
  const std::string timing = fmt::format(
      "{:.1f} s{}, {:.1f} samples/s, data wait {:.1f} s ({:.0f}%){}{}", train.seconds,
      val ? fmt::format(" + {:.1f} s validation", val->seconds) : "", sps, train.data_seconds, 100.0 * data_share,
      std::isfinite(gpu_busy) ? fmt::format(", gpu {:.0f}%", 100.0 * gpu_busy) : "", idle.empty() ? "" : "; " + idle);
  if (val) {
    const std::string dose = settings_.scores_dose ? fmt::format(" val_dose_score {:.4f} val_dvh_score {:.4f}",
                                                                 val->dose_score, val->dvh_score)
                                                   : "";
    std::vector<std::string> per_class;  // nnU-Net's "Pseudo dice [0.87, 0.61]"
    for (double d : val->pseudo_dice_per_class)
      per_class.push_back(std::isfinite(d) ? fmt::format("{:.4f}", d) : "nan");
    const std::string pseudo = std::isfinite(val->pseudo_dice)
                                   ? fmt::format(" pseudo_dice {:.4f} [{}] (ema {:.4f})", val->pseudo_dice,
                                                 fmt::join(per_class, ", "), val->pseudo_dice_ema)
                                   : "";
    const std::string metric =
        std::isfinite(val->metric) ? fmt::format(" {} {:.4f}", settings_.metric_name, val->metric) : "";
    spdlog::info("epoch {}/{}: train_loss {:.5f} val_loss {:.5f}{}{}{}{} | {}", epoch, settings_.cfg.training.epochs,
                 train.train_loss, val->loss, metric, dose, pseudo, improved ? " (best)" : "", timing);
  } else {
    spdlog::info("epoch {}/{}: train_loss {:.5f} | {}", epoch, settings_.cfg.training.epochs, train.train_loss, timing);
  }
  flush_logs();
}

void RunLog::view_failed(const std::string& what, const std::exception& e) {
  if (view_warned_) return;
  view_warned_ = true;  // once: a full disk must not flood the log
  spdlog::warn("{} not written (training goes on; reported once): {}", what, error_line(e));
}

void RunLog::epoch_views(int64_t global_step, const std::map<std::string, std::string>& row,
                         const std::optional<ValStats>& val) {
  const auto& logging = settings_.cfg.logging;
  std::optional<MetricsTable> table;
  if (logging.plot || tb_) {
    try {
      table = read_metrics_csv(paths_.metrics);
      if (logging.plot) {
        write_progress_plot(*table, PlotFiles{paths_.root / "progress.png", paths_.root / "progress.svg"},
                            settings_.cfg.experiment.name);
      }
    } catch (const std::exception& e) {
      view_failed("progress.png", e);
    }
  }
  if (!tb_) return;
  try {
    std::vector<std::pair<std::string, double>> scalars;
    for (const auto& column : csv_->columns()) {
      if (column == "step") continue;
      const auto it = row.find(column);
      const auto v = it == row.end() ? std::nullopt : parse_double(it->second);
      if (v) scalars.emplace_back("epoch/" + column, *v);
    }
    tb_->add_scalars(global_step, scalars);
    if (table) {
      constexpr int kTensorBoardPlotSide = 900;
      tb_->add_image(
          "progress", global_step,
          render_progress_png(*table, settings_.cfg.experiment.name, kTensorBoardPlotSide, kTensorBoardPlotSide),
          kTensorBoardPlotSide, kTensorBoardPlotSide, /*channels=*/3);
    }
    if (val && val->preview_input.defined()) {
      const auto& t = val->preview_target;
      const bool labels = settings_.labels;
      // Target and prediction on one scale: the label range, or the target's range.
      const double lo = labels ? 0.0 : t.min().item<double>();
      const double hi =
          labels ? static_cast<double>(std::max<int64_t>(1, settings_.num_classes - 1)) : t.max().item<double>();
      const int h = static_cast<int>(t.size(0)), w = static_cast<int>(t.size(1));
      const std::string prefix = "val/" + val->preview_case + "/";
      tb_->add_image(prefix + "input", global_step, slice_png(val->preview_input, 0, 0), h, w, 1);
      tb_->add_image(prefix + "target", global_step, slice_png(t, lo, hi), h, w, 1);
      tb_->add_image(prefix + "prediction", global_step, slice_png(val->preview_prediction, lo, hi), h, w, 1);
    }
    tb_->flush();
  } catch (const std::exception& e) {
    view_failed("TensorBoard", e);
  }
}

void RunLog::done(const RunPosition& state, const torch::Device& device) const {
  clear_progress();
  spdlog::info("done: {} epochs, {} steps; best {} {} at epoch {}; run folder {}", state.epoch, state.global_step,
               settings_.monitor_name, fmt_metric(state.best_metric), state.best_epoch, paths_.root.string());
  const double host = static_cast<double>(peak_memory_bytes(torch::kCPU));
  const GpuMemoryPeaks gpu = gpu_memory_peaks(device);
  spdlog::info("peak memory: host {}{}", human_bytes(host),
               gpu.allocated >= 0
                   ? fmt::format(", GPU {} allocated, {} reserved", human_bytes(static_cast<double>(gpu.allocated)),
                                 human_bytes(static_cast<double>(gpu.reserved)))
                   : "");
  flush_logs();
}

void RunLog::first_step() const {
  spdlog::info("first step done {:.1f} s after the start", seconds_since_process_start());
}

}  // namespace u3d
