#include "u3d/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <thread>
#include <utility>

#include "u3d/dose_metrics.h"
#include "u3d/errors.h"
#include "u3d/files.h"
#include "u3d/optimizer.h"
#include "u3d/predictor.h"
#include "u3d/preflight.h"
#include "u3d/resume.h"
#include "u3d/signals.h"
#include "u3d/version.h"

namespace u3d {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt_metric(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : ""; }

}  // namespace

Trainer::Trainer(Config cfg, TrainOptions options)
    : cfg_(std::move(cfg)),
      options_(std::move(options)),
      paths_(cfg_),
      store_(paths_.checkpoints, cfg_.checkpoint.keep_last),
      metric_{"val_metric", false},
      faults_(TestFaults::from_env()) {}

Trainer::~Trainer() = default;

TrainState Trainer::fit() {
  StopSignals signals;  // SIGINT/SIGTERM/SIGHUP: finish the step, checkpoint, exit 128 + signal
  check_run_folder();
  setup_runtime();
  load_data();  // calls prepare_run() once the data preflight has passed
  if (stopping()) {
    spdlog::info("stopped by {} before training started; nothing to save", StopSignals::name(stop_signal_));
    return state_;
  }
  build_model();
  if (options_.resume) restore();
  record_run();
  print_banner();
  for (int64_t epoch = state_.epoch + 1; epoch <= cfg_.training.epochs && !stopping(); ++epoch) {
    const EpochStats stats = train_epoch(epoch);
    if (stop_signal_) break;  // train_epoch wrote the checkpoint
    std::optional<ValStats> val;
    bool improved = false;
    const bool full_val = val_cache_ && cfg_.training.val_full &&
                          (epoch % cfg_.training.val_every == 0 || epoch == cfg_.training.epochs);
    if (full_val || val_sampler_) {
      val = full_val ? validate() : ValStats{};
      if (!val->complete) {  // stopped during validation: the epoch's steps are done, its validation is not
        save_inside_epoch(epoch);
        break;
      }
      if (val_sampler_) validate_patches(epoch, *val);
      const auto [score, higher_is_better] = monitored(*val);
      improved = is_improvement(score, state_.best_metric, higher_is_better);
      if (!std::isfinite(score)) {
        spdlog::warn("epoch {}: the validation {} is not finite; it is never taken as the best", epoch,
                     monitor_name());
      }
      if (improved) {
        state_.best_metric = score;
        state_.best_epoch = epoch;
      }
    }
    state_.epoch = epoch;
    state_.step_in_epoch = 0;
    state_.epoch_samples = 0;
    state_.epoch_seconds = 0;
    state_.epoch_data_seconds = 0;
    monitor_->start_epoch();  // a checkpoint at an epoch boundary holds empty epoch sums
    // The metrics row first, then the checkpoint: a kill in between leaves a row newer than the
    // newest checkpoint, which the resume drops and writes again (never a missing row).
    log_epoch(epoch, stats, val, improved);
    save_checkpoints(epoch, improved);
  }
  if (stop_signal_) {
    if (saved_global_step_ != state_.global_step && state_.global_step > 0) {  // stopped between an epoch's end and its checkpoint cadence
      commit_checkpoint(store_.periodic_path(state_.epoch), /*periodic=*/true);
    }
    if (last_save_failed_) {
      throw IoError(fmt::format("stopped by {}, but the checkpoint could not be written (see above); the newest "
                                "intact checkpoint in {} is older",
                                StopSignals::name(stop_signal_), paths_.checkpoints.string()));
    }
    if (state_.global_step == 0) {
      spdlog::info("stopped by {} before the first step; nothing to save", StopSignals::name(stop_signal_));
    } else {
      spdlog::info("stopped by {} at epoch {} step {} (global step {}); checkpoint {} is the newest; continue with "
                   "--resume",
                   StopSignals::name(stop_signal_), state_.epoch + (state_.step_in_epoch > 0 ? 1 : 0),
                   state_.step_in_epoch, state_.global_step,
                   store_.latest() ? store_.latest()->filename().string() : std::string("?"));
    }
    flush_logs();
    return state_;
  }
  if (last_save_failed_) {
    throw IoError(fmt::format("training finished, but the last checkpoint could not be written (see the warnings "
                              "above); the newest intact checkpoint in {} is older",
                              paths_.checkpoints.string()));
  }
  spdlog::info("done: {} epochs, {} steps; best {} {} at epoch {}; run folder {}", state_.epoch, state_.global_step,
               monitor_name(), fmt_metric(state_.best_metric), state_.best_epoch, paths_.root.string());
  flush_logs();
  return state_;
}

bool Trainer::stopping() {
  if (!stop_signal_) stop_signal_ = StopSignals::pending();
  return stop_signal_ != 0;
}

void Trainer::check_run_folder() const {
  if (!options_.resume && store_.latest()) {
    throw ConfigError(fmt::format("{} already holds checkpoints of a run named '{}'; continue it with --resume, or "
                                  "choose another experiment.name",
                                  paths_.checkpoints.string(), cfg_.experiment.name));
  }
}

void Trainer::prepare_run() {
  ensure_writable_directory(paths_.root);
  ensure_writable_directory(paths_.checkpoints);
  store_.remove_stale_temporaries();  // left by a run killed while writing
  remove_stale_temporaries(paths_.root);
  add_log_file(paths_.log);
}

void Trainer::record_run() const {
  write_file_atomic(paths_.config, fmt::format("# resolved config of run '{}' (trainer {} {})\n{}",
                                               cfg_.experiment.name, version(), git_commit(), to_yaml(cfg_)));
  if (!options_.resume) csv_->start_fresh();
  if (step_csv_ && !options_.resume) step_csv_->start_fresh();
}

void Trainer::setup_runtime() { runtime_ = init_runtime(cfg_); }

void Trainer::load_data() {
  std::error_code ec;
  if (!std::filesystem::exists(cfg_.data.path, ec)) {
    throw ConfigError(fmt::format("{}: data.path: dataset file {} not found (make one with `trainer synth` or "
                                  "`trainer import`)",
                                  cfg_.origin.count("data.path") ? cfg_.origin.at("data.path") : cfg_.source,
                                  cfg_.data.path));
  }
  const auto t0 = Clock::now();
  reader_ = std::make_unique<DatasetReader>(cfg_.data.path);
  const auto& info = reader_->info();
  auto split_ids = [&](const std::string& key, const std::string& name) -> const std::vector<std::string>& {
    if (!reader_->has_split(name)) {
      std::vector<std::string> names;
      for (const auto& [n, ids] : info.splits) names.push_back(n);
      throw ConfigError(fmt::format("{}: split '{}' is not in {}; it has: {}", key, name, cfg_.data.path,
                                    fmt::join(names, ", ")));
    }
    const auto& ids = reader_->split(name);
    if (ids.empty()) throw ConfigError(fmt::format("{}: split '{}' of {} is empty", key, name, cfg_.data.path));
    return ids;
  };
  // `dataset` entries become the file's recorded specs, so config.yaml and checkpoints carry them.
  cfg_.data.normalize = resolve_normalization(cfg_.data, info);
  pre_ = std::make_unique<Preprocessor>(cfg_.data, info);
  check_batch_memory(cfg_.data.batch_size, cfg_.data.patch_size, pre_->in_channels());  // before the preflight writes
  metric_ = task_metric(info.task);
  // OpenKBP dose metrics during validation: checked before the (slow) cache loads.
  std::vector<DvhStructure> dvh_structures;
  if (info.task == Task::kDose) dvh_structures = resolve_dvh_structures(cfg_.data.dvh_structures, info.channel_names);
  if (!cfg_.data.val_split.empty() && dvh_structures.empty() &&
      (cfg_.checkpoint.monitor == Monitor::kValDoseScore || cfg_.checkpoint.monitor == Monitor::kValDvhScore)) {
    throw ConfigError(fmt::format("{}: checkpoint.monitor: {} needs the OpenKBP dose metrics, which are scored only for "
                                  "a dose dataset whose channels include structures named by data.dvh_structures",
                                  cfg_.origin.count("checkpoint.monitor") ? cfg_.origin.at("checkpoint.monitor")
                                                                          : cfg_.source,
                                  to_string(cfg_.checkpoint.monitor)));
  }
  const auto& train_ids = split_ids("data.train_split", cfg_.data.train_split);
  cases_sha256_ = case_ids_sha256(train_ids);
  if (cfg_.data.preflight) {
    std::vector<std::string> ids = train_ids;
    if (!cfg_.data.val_split.empty()) {
      const auto& val_ids = split_ids("data.val_split", cfg_.data.val_split);
      ids.insert(ids.end(), val_ids.begin(), val_ids.end());
    }
    const DataReport report = check_dataset(cfg_.data.path, ids, runtime_.threads);
    log_report(report, "preflight");
    if (report.errors() > 0) {
      throw DataError(fmt::format("{}: the preflight found {} error(s) in {} of the {} train/val cases (listed above); "
                                  "fix them or leave those cases out of the splits (`trainer check-data {}` lists "
                                  "every problem)",
                                  cfg_.data.path, report.errors(), report.bad_cases().size(), ids.size(),
                                  cfg_.data.path));
    }
  }
  prepare_run();  // every check before the slow cache load has passed: the run folder is used from here
  CacheOptions cache_options;
  cache_options.placement = cfg_.data.cache;
  cache_options.device = runtime_.device;
  cache_options.float16 = cfg_.data.cache_float16;
  cache_options.threads = loading_threads(cfg_);  // one per core: nothing else runs yet
  cache_options.gpu_share = cfg_.data.gpu_cache_share;
  train_cache_ = std::make_unique<StackedCache>(
      StackedCache::load(*reader_, split_ids("data.train_split", cfg_.data.train_split), *pre_, cache_options));
  if (!train_cache_->has_targets()) {
    throw DataError(fmt::format("{}: split '{}' has cases without a target; training needs targets", cfg_.data.path,
                                cfg_.data.train_split));
  }
  if (!cfg_.data.val_split.empty()) {
    val_cache_ = std::make_unique<TensorCache>(
        TensorCache::load(*reader_, split_ids("data.val_split", cfg_.data.val_split), *pre_, runtime_.threads));
    if (!val_cache_->has_targets()) {
      throw DataError(fmt::format("{}: split '{}' has cases without a target; validation needs targets",
                                  cfg_.data.path, cfg_.data.val_split));
    }
  }
  if (val_cache_ && !dvh_structures.empty()) {
    std::vector<std::string> names;
    for (const auto& s : dvh_structures) names.push_back(s.name);
    dose_eval_ = std::make_unique<DoseEvaluator>(*reader_, reader_->split(cfg_.data.val_split), std::move(dvh_structures),
                                                 runtime_.threads);
    spdlog::info("validation: OpenKBP dose score and DVH score over {} structures ({})", names.size(),
                 fmt::join(names, ", "));
  }
  const SamplerOptions so = sampler_options(cfg_, pre_->channel_names());
  sampler_ = std::make_unique<PatchSampler>(*train_cache_, so);
  if (val_cache_ && cfg_.training.val_patch_batches > 0) {
    if (info.task != Task::kSegmentation) {
      throw ConfigError("training.val_patch_batches: the pseudo-Dice needs a segmentation dataset; set it to 0");
    }
    SamplerOptions vo = so;
    vo.seed = so.seed ^ 0x7A1D0000ull;  // its own stream, independent of the training patches
    vo.apply_augmentation = false;
    val_sampler_ = std::make_unique<PatchSampler>(*val_cache_, vo);
  }
  steps_per_epoch_ = cfg_.training.steps_per_epoch > 0
                         ? cfg_.training.steps_per_epoch
                         : (train_cache_->size() + cfg_.data.batch_size - 1) / cfg_.data.batch_size;
  LoaderOptions lo;
  lo.device = runtime_.device;
  lo.workers = data_workers(cfg_);
  lo.prefetch = cfg_.data.prefetch;
  lo.steps_per_epoch = steps_per_epoch_;
  lo.epochs = cfg_.training.epochs;
  if (lo.prefetch > 0 && lo.prefetch < lo.workers) {
    spdlog::warn("data.prefetch: {} is below data.workers = {}; only {} sampler threads can work at once", lo.prefetch,
                 lo.workers, lo.prefetch);
  }
  loader_ = std::make_unique<BatchLoader>(*sampler_, lo);
  state_.train_target_mean = train_cache_->target_mean();
  spdlog::info("data: {} ({}), {} train / {} val cases, {} input channels [{}], cache {} in {:.1f} s",
               cfg_.data.path, to_string(info.task), train_cache_->size(), val_cache_ ? val_cache_->size() : 0,
               pre_->in_channels(), fmt::join(pre_->channel_names(), ", "),
               human_bytes(static_cast<double>(train_cache_->bytes() + (val_cache_ ? val_cache_->bytes() : 0))),
               seconds_since(t0));
  spdlog::info("data: training cache {}; batches: {}", train_cache_->describe(), loader_->describe());
}

void Trainer::build_model() {
  torch::manual_seed(static_cast<uint64_t>(cfg_.experiment.seed));
  net_ = build_network(cfg_.model, pre_->in_channels(), pre_->out_channels());
  net_->to(runtime_.device);
  if (resolve_channels_last(cfg_.model, runtime_.device)) to_channels_last(*net_);  // before the optimizer's moments
  loss_ = std::make_unique<Loss>(resolve_loss(cfg_.training.loss, pre_->task(), train_cache_->has_masks()));
  optimizer_ = std::make_unique<Optimizer>(cfg_.training, net_->parameters());
  monitor_ = std::make_unique<StepMonitor>(runtime_.device);
  step_ = std::make_unique<TrainStep>(cfg_, runtime_.device, *net_, *loss_, *optimizer_, monitor_.get());
  if (!faults_.inf_grad.empty()) {
    step_->set_after_backward([this](const std::vector<torch::Tensor>& params) {
      if (!faults_.inf_grad.count(state_.global_step + 1)) return;
      torch::NoGradGuard no_grad;
      plant_value(params[0].mutable_grad(), std::numeric_limits<float>::infinity());  // any layout
    });
  }
  if (DeviceSampler* sampler = loader_->device_sampler(); sampler && step_->features().cuda_graph) {
    // data.cache: gpu: capture the sampler with the step, so one replay is one whole step.
    std::string why;
    if (faults_.any()) {
      why = "test fault injection is active";
    } else if (sampler->capturable(&why)) {
      sampling_in_graph_ = step_->set_batch_source([sampler] { return sampler->next_batch(); });
    }
    if (!sampling_in_graph_) spdlog::info("training step: GPU sampling runs outside the CUDA graph: {}", why);
  }
  cadence_ = std::make_unique<CheckpointCadence>(cfg_.checkpoint.every_epochs, cfg_.checkpoint.every_minutes,
                                                 cfg_.training.epochs);
  schedule_ = std::make_unique<LrSchedule>(cfg_.training, cfg_.training.epochs * steps_per_epoch_);
  if (cfg_.model.deep_supervision && pre_->task() != Task::kSegmentation) {
    throw ConfigError("model.deep_supervision: needs a segmentation dataset (labels to down-sample)");
  }
  std::vector<std::string> columns = {"epoch",        "step",         "lr",         "train_loss",
                                      "val_loss",     metric_.name,   "best",       "epoch_seconds",
                                      "data_seconds", "data_share",   "samples_per_second", "skipped_steps"};
  if (val_sampler_) columns.insert(columns.begin() + 6, {"val_pseudo_dice", "val_pseudo_dice_ema"});
  if (dose_eval_) columns.insert(std::find(columns.begin(), columns.end(), "best"), {"val_dose_score", "val_dvh_score"});
  csv_ = std::make_unique<MetricsCsv>(paths_.metrics, columns);
  if (cfg_.logging.step_log) {
    step_csv_ = std::make_unique<MetricsCsv>(paths_.root / "steps.csv",
                                             std::vector<std::string>{"step", "epoch", "step_in_epoch", "lr", "loss",
                                                                      "skipped"});
  }
}

void Trainer::restore() {
  check_allow_patterns(options_.allow_config_change);
  const auto path = options_.resume->empty() ? store_.resolve("last") : store_.resolve(*options_.resume);
  const CheckpointInfo saved_info = read_checkpoint_info(path);
  const Config saved = load_config_from_string(saved_info.config_yaml, path.string() + " (config)");
  check_config_drift(saved, cfg_, options_.allow_config_change, path.string());
  if (saved_info.sampler.cases_sha256 != cases_sha256_ &&
      !key_matches("data.path", options_.allow_config_change) &&
      !key_matches("data.train_split", options_.allow_config_change)) {
    throw ConfigError(fmt::format("resume: the training split '{}' of {} is not the one {} was trained on ({} cases "
                                  "then, {} now, or other case ids); the sampler would draw other batches. Accept "
                                  "it with --allow-config-change data.path",
                                  cfg_.data.train_split, cfg_.data.path, path.string(), saved_info.sampler.cases,
                                  train_cache_->size()));
  }
  const CheckpointInfo info = load_checkpoint(path, *net_, optimizer_.get(), runtime_.device, /*restore_rng=*/true);
  // The checkpoint's strides come with its tensors (contiguous from a CPU run, say): back to this
  // run's layout, gradients and optimizer state with them.
  set_layout(*net_, step_->features().channels_last);
  optimizer_->match_parameter_layout();
  state_ = info.state;
  if (state_.step_in_epoch > steps_per_epoch_) state_.step_in_epoch = steps_per_epoch_;
  monitor_->restore(state_);
  if (step_->scaler() && saved.training.precision == Precision::kFp16) {  // else a fresh scaler
    step_->scaler()->load(state_.loss_scale, state_.loss_scale_growth);
  }
  saved_global_step_ = state_.global_step;
  csv_->resume(state_.epoch);
  if (step_csv_) step_csv_->resume(state_.global_step);
  spdlog::info("resume: {} ({}, global step {}; written by trainer {} {} at {})", path.string(),
               state_.step_in_epoch > 0 ? fmt::format("inside epoch {} after step {}", state_.epoch + 1, state_.step_in_epoch)
                                        : fmt::format("end of epoch {}", state_.epoch),
               state_.global_step, info.version, info.commit, info.created);
}

void Trainer::print_banner() const {
  spdlog::info("trainer {} ({}), LibTorch {}, device {}, {} threads", version(), git_commit(), TORCH_VERSION,
               runtime_.device.str(), runtime_.threads);
  spdlog::info("model: {} with {} trainable parameters; loss {}; {} steps per epoch",
               to_string(cfg_.model.architecture), count_parameters(*net_), to_string(loss_->kind()), steps_per_epoch_);
  spdlog::info("resolved config (also in {}):\n{}", paths_.config.string(), describe(cfg_));
}

EpochStats Trainer::train_epoch(int64_t epoch) {
  net_->train();
  EpochStats stats;
  const auto t0 = Clock::now();
  auto last_progress = t0;
  const int64_t first_step = state_.step_in_epoch;  // > 0 when resumed inside the epoch
  int64_t samples = 0;                              // drawn by this process (for samples/s)
  // The epoch's time in the processes before a resume (its row reports the whole epoch, also when
  // a stop came after its last step, during validation).
  const double carried_seconds = state_.epoch_seconds, carried_data_seconds = state_.epoch_data_seconds;
  try {
    for (int64_t step = first_step; step < steps_per_epoch_; ++step) {
      const double lr = schedule_->at(state_.global_step);
      optimizer_->set_lr(lr);
      torch::Tensor loss;
      if (sampling_in_graph_) {  // GPU sampler and step in one graph replay: no batch to wait for
        loader_->device_sampler()->seek(epoch, step, steps_per_epoch_);
        loss = step_->run_sampled();
        last_found_inf_ = step_->found_inf();
      } else {
        const double waited = loader_->wait_seconds();
        Batch batch = loader_->next(epoch, step);  // ready on the device; blocks only while none is ready
        stats.data_seconds += loader_->wait_seconds() - waited;
        if (faults_.nan_batch.count(state_.global_step + 1)) {
          batch.image = batch.image.clone();
          plant_value(batch.image, std::numeric_limits<float>::quiet_NaN());
        }
        loss = train_step(batch);
      }
      ++state_.global_step;
      state_.step_in_epoch = step + 1;
      state_.epoch_samples += cfg_.data.batch_size;
      samples += cfg_.data.batch_size;
      state_.epoch_seconds = carried_seconds + seconds_since(t0);
      state_.epoch_data_seconds = carried_data_seconds + stats.data_seconds;
      after_step(epoch, step, lr, loss);

      if (cfg_.logging.progress_seconds > 0 && seconds_since(last_progress) >= cfg_.logging.progress_seconds &&
          step + 1 < steps_per_epoch_) {
        last_progress = Clock::now();
        const auto totals = monitor_->totals();  // the only host read between checks
        const int64_t steps = state_.step_in_epoch - first_step;
        const double elapsed = seconds_since(t0);
        const double per_step = elapsed / static_cast<double>(steps);
        const int64_t counted = state_.step_in_epoch - totals.skipped;
        spdlog::info("epoch {}/{} step {}/{} loss {:.5f} lr {:.3g} {:.1f} samples/s, data wait {:.0f}%, epoch ends in "
                     "{:.0f} s{}",
                     epoch, cfg_.training.epochs, step + 1, steps_per_epoch_,
                     counted > 0 ? totals.loss_sum / static_cast<double>(counted) : std::nan(""), lr,
                     static_cast<double>(samples) / elapsed, 100.0 * stats.data_seconds / elapsed,
                     per_step * static_cast<double>(steps_per_epoch_ - step - 1),
                     totals.skipped > 0 ? fmt::format(", {} steps skipped (NaN/Inf)", totals.skipped) : "");
      }
      if (stopping()) {
        save_inside_epoch(epoch);
        break;
      }
      if (cadence_->due_inside_epoch() && step + 1 < steps_per_epoch_) save_inside_epoch(epoch);
    }
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    throw TrainingError(out_of_memory_message(cfg_, runtime_.device, "training step",
                                              precision_name(step_->features().precision)) +
                        "; " + last_checkpoint_note());
  }
  check_nonfinite();
  const auto totals = monitor_->totals();
  const int64_t counted = state_.step_in_epoch - totals.skipped;
  state_.epoch_seconds = carried_seconds + seconds_since(t0);
  stats.seconds = state_.epoch_seconds;
  stats.data_seconds = state_.epoch_data_seconds;
  stats.samples = state_.epoch_samples;
  stats.skipped = totals.skipped;
  stats.train_loss = counted > 0 ? totals.loss_sum / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN();
  return stats;
}

torch::Tensor Trainer::train_step(const Batch& batch) {
  const torch::Tensor loss = step_->run(batch);  // train_step.h: eager or a replayed CUDA graph
  last_found_inf_ = step_->found_inf();
  return loss;
}

void Trainer::after_step(int64_t epoch, int64_t step, double lr, const torch::Tensor& loss) {
  if (step_csv_) {  // debugging aid: one host read per step
    const float value = loss.item<float>();
    const bool skipped = last_found_inf_.item<float>() > 0;
    step_csv_->append({{"step", std::to_string(state_.global_step)},
                       {"epoch", std::to_string(epoch)},
                       {"step_in_epoch", std::to_string(step + 1)},
                       {"lr", fmt::format("{:.9g}", lr)},
                       {"loss", fmt::format("{:.9g}", value)},
                       {"skipped", skipped ? "1" : "0"}});
  }
  if (state_.global_step % cfg_.training.max_nonfinite_steps == 0) check_nonfinite();
}

void Trainer::check_nonfinite() {
  const auto totals = monitor_->totals();
  if (totals.longest_run < cfg_.training.max_nonfinite_steps) {
    monitor_->reset_longest_run();
    return;
  }
  throw TrainingError(fmt::format(
      "training stopped at global step {}: {} steps in a row had a non-finite loss or gradient norm (NaN/Inf; each "
      "was skipped, weights unchanged; training.max_nonfinite_steps = {}); {} skipped in total; {}. Lower training.lr, "
      "set training.grad_clip_norm, or check the data (trainer check-data {})",
      state_.global_step, totals.longest_run, cfg_.training.max_nonfinite_steps, totals.skipped_total,
      last_checkpoint_note(), cfg_.data.path));
}

std::string Trainer::last_checkpoint_note() const {
  const auto last = saved_global_step_ >= 0 ? store_.latest() : std::nullopt;
  if (!last) return "no checkpoint was written yet";
  return fmt::format("the last checkpoint {} is intact (continue with --resume; --allow-config-change KEY for "
                     "settings you change)",
                     last->string());
}

ValStats Trainer::validate() {
  SlidingWindowOptions sw{cfg_.data.patch_size, cfg_.predict.overlap,
                          cfg_.predict.batch_size > 0 ? cfg_.predict.batch_size : cfg_.data.batch_size,
                          cfg_.predict.gaussian, /*mirror=*/false,
                          /*autocast=*/inference_autocast(cfg_.training, runtime_.device),  // as the training step
                          /*channels_last=*/step_->features().channels_last};
  std::vector<double> losses, metrics;
  std::vector<PatientDoseMetrics> dose_metrics;
  try {
  for (const auto& c : val_cache_->cases()) {
    if (stopping()) {
      ValStats interrupted;
      interrupted.complete = false;
      return interrupted;
    }
    if (faults_.slow_val_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(faults_.slow_val_ms));
    const torch::Tensor out = sliding_window_predict(*net_, c.image, sw, runtime_.device);  // (K, D, H, W)
    const torch::Tensor target = c.target.to(runtime_.device);
    const torch::Tensor mask = c.mask.defined() ? c.mask.unsqueeze(0).to(runtime_.device, torch::kFloat) : torch::Tensor();
    const torch::Tensor batch_target = pre_->task() == Task::kSegmentation ? target.unsqueeze(0).to(torch::kLong)
                                                                            : target.unsqueeze(0);
    losses.push_back((*loss_)(out.unsqueeze(0), batch_target, mask).item<double>());
    const torch::Tensor pred_on_device = finalize_prediction(out, *pre_);
    if (dose_eval_) {
      // On the device: the prediction in Gy, scored as its submission file would be.
      const torch::Tensor dose_mask = c.mask.defined() ? c.mask[0] : torch::ones_like(c.raw_target, torch::kUInt8);
      dose_metrics.push_back(dose_eval_->evaluate(c.id, pred_on_device, c.raw_target.to(runtime_.device),
                                                  dose_mask.to(runtime_.device)));
    }
    const torch::Tensor pred = pred_on_device.cpu();
    if (pre_->task() == Task::kSegmentation) {
      metrics.push_back(nan_mean(dice_per_class(pred, c.target, reader_->info().num_classes)));
    } else {
      metrics.push_back(masked_mae(pred, c.raw_target, c.mask.defined() ? c.mask[0] : torch::Tensor()));
    }
  }
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    throw TrainingError(out_of_memory_message(cfg_, runtime_.device, "validation") + "; " + last_checkpoint_note());
  }
  if (faults_.nan_val.count(state_.epoch + 1)) {
    return ValStats{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  }
  ValStats stats{nan_mean(losses), nan_mean(metrics)};
  if (dose_eval_) {
    const DoseScores scores = dose_scores(dose_metrics);
    stats.dose_score = scores.dose_score;
    stats.dvh_score = scores.dvh_score;
  }
  return stats;
}

std::pair<double, bool> Trainer::monitored(const ValStats& val) const {
  switch (resolved_monitor()) {
    case Monitor::kValLoss: return {val.loss, false};
    case Monitor::kValDoseScore: return {val.dose_score, false};
    case Monitor::kValDvhScore: return {val.dvh_score, false};
    case Monitor::kPseudoDice: return {val.pseudo_dice, true};
    case Monitor::kPseudoDiceEma: return {val.pseudo_dice_ema, true};
    case Monitor::kValMetric:
    case Monitor::kAuto: break;
  }
  return {val.metric, metric_.higher_is_better};
}

Monitor Trainer::resolved_monitor() const {
  if (cfg_.checkpoint.monitor != Monitor::kAuto) return cfg_.checkpoint.monitor;
  if (dose_eval_ && cfg_.training.val_full) return Monitor::kValDoseScore;
  return cfg_.training.val_full ? Monitor::kValMetric : Monitor::kPseudoDiceEma;
}

std::string Trainer::monitor_name() const {
  switch (resolved_monitor()) {
    case Monitor::kValLoss: return "val_loss";
    case Monitor::kValDoseScore: return "val_dose_score";
    case Monitor::kValDvhScore: return "val_dvh_score";
    case Monitor::kPseudoDice: return "val_pseudo_dice";
    case Monitor::kPseudoDiceEma: return "val_pseudo_dice_ema";
    case Monitor::kValMetric:
    case Monitor::kAuto: break;
  }
  return metric_.name;
}

void Trainer::validate_patches(int64_t epoch, ValStats& stats) {
  torch::NoGradGuard no_grad;
  const bool was_training = net_->is_training();
  net_->eval();
  const int64_t k = pre_->out_channels();
  const auto autocast = inference_autocast(cfg_.training, runtime_.device);  // as the training step
  // Device sums over every batch, read once: (K,) true positives, false positives, false negatives.
  const auto counts = torch::TensorOptions().dtype(torch::kLong).device(runtime_.device);
  torch::Tensor tp = torch::zeros({k}, counts), fp = torch::zeros({k}, counts), fn = torch::zeros({k}, counts);
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(runtime_.device));
  const torch::Tensor classes = torch::arange(k, counts).view({1, k, 1, 1, 1});
  const int64_t batches = cfg_.training.val_patch_batches;
  for (int64_t b = 0; b < batches; ++b) {
    const Batch batch = val_sampler_->batch(epoch, b).to(runtime_.device);
    torch::Tensor image = batch.image;
    if (step_->features().channels_last) image = image.contiguous(at::MemoryFormat::ChannelsLast3d);
    torch::Tensor out;  // (N, K, d, h, w) logits, float32
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(runtime_.device.type(), *autocast);
      out = net_->forward(image);
    }
    out = out.to(torch::kFloat);
    loss_sum.add_((*loss_)(out, batch.target, batch.mask).detach().to(torch::kDouble));
    const torch::Tensor p = out.argmax(1).unsqueeze(1) == classes;  // (N, K, d, h, w)
    const torch::Tensor y = batch.target.unsqueeze(1) == classes;
    const std::vector<int64_t> dims = {0, 2, 3, 4};
    tp.add_((p & y).sum(dims));
    fp.add_((p & ~y).sum(dims));
    fn.add_((~p & y).sum(dims));
  }
  net_->train(was_training);
  const torch::Tensor host = torch::stack({tp, fp, fn}).cpu();  // the one host read
  const auto h = host.accessor<int64_t, 2>();
  const double loss_total = loss_sum.item<double>();
  std::vector<double> dice;
  for (int64_t c = 1; c < k; ++c) {
    const double denom = static_cast<double>(2 * h[0][c] + h[1][c] + h[2][c]);
    dice.push_back(denom > 0 ? 2.0 * static_cast<double>(h[0][c]) / denom : std::numeric_limits<double>::quiet_NaN());
  }
  stats.pseudo_dice = nan_mean(dice);
  if (std::isfinite(stats.pseudo_dice)) {
    const double w = cfg_.training.pseudo_dice_ema;
    state_.pseudo_dice_ema = std::isfinite(state_.pseudo_dice_ema)
                                 ? w * state_.pseudo_dice_ema + (1.0 - w) * stats.pseudo_dice
                                 : stats.pseudo_dice;
  }
  stats.pseudo_dice_ema = state_.pseudo_dice_ema;
  if (!std::isfinite(stats.loss) && batches > 0) stats.loss = loss_total / static_cast<double>(batches);
}

CheckpointInfo Trainer::checkpoint_info() const {
  CheckpointInfo info;
  info.state = state_;
  monitor_->store(info.state);
  if (auto* scaler = step_ ? step_->scaler() : nullptr) {  // host read, at checkpoints only
    info.state.loss_scale = scaler->scale_value();
    info.state.loss_scale_growth = scaler->growth_tracker_value();
  }
  info.state.epoch_loss_steps = info.state.step_in_epoch - info.state.epoch_skipped;
  info.sampler.seed = cfg_.experiment.seed;
  info.sampler.batch_size = cfg_.data.batch_size;
  info.sampler.epoch = state_.epoch + 1;
  info.sampler.next_sample = state_.step_in_epoch * cfg_.data.batch_size;
  info.sampler.cases = train_cache_->size();
  info.sampler.cases_sha256 = cases_sha256_;
  info.config_yaml = to_yaml(cfg_);
  info.task = to_string(pre_->task());
  info.in_channels = pre_->in_channels();
  info.out_channels = pre_->out_channels();
  return info;
}

void Trainer::save_checkpoints(int64_t epoch, bool improved) {
  if (cadence_->due_at_epoch_end(epoch)) commit_checkpoint(store_.periodic_path(epoch), /*periodic=*/true);
  if (improved) commit_checkpoint(store_.best_path(), /*periodic=*/false);
}

void Trainer::save_inside_epoch(int64_t epoch) {
  check_nonfinite();
  commit_checkpoint(store_.step_path(epoch, state_.step_in_epoch), /*periodic=*/true);
}

void Trainer::commit_checkpoint(const std::filesystem::path& path, bool periodic) {
  bool written = true;
  try {
    save_checkpoint(path, checkpoint_info(), *net_, optimizer_.get());
  } catch (const IoError& e) {
    if (cfg_.checkpoint.on_error == SaveErrorPolicy::kStop) throw;
    written = false;
    spdlog::warn("checkpoint not written: {}; training goes on and retries at the next checkpoint "
                 "(checkpoint.on_error = continue)",
                 e.what());
  }
  if (!periodic) return;  // best.pt: retried at the next improvement
  last_save_failed_ = !written;
  cadence_->mark_saved();
  if (written) {
    saved_global_step_ = state_.global_step;
    store_.prune();  // only after the new checkpoint is committed
  }
}

void Trainer::log_epoch(int64_t epoch, const EpochStats& train, const std::optional<ValStats>& val, bool improved) {
  const double sps = train.seconds > 0 ? static_cast<double>(train.samples) / train.seconds : 0;
  const double lr = schedule_->at(std::max<int64_t>(0, state_.global_step - 1));
  csv_->append({{"epoch", std::to_string(epoch)},
                {"step", std::to_string(state_.global_step)},
                {"lr", fmt::format("{:.6g}", lr)},
                {"train_loss", fmt_metric(train.train_loss)},
                {"val_loss", val ? fmt_metric(val->loss) : ""},
                {metric_.name, val ? fmt_metric(val->metric) : ""},
                {"val_dose_score", val ? fmt_metric(val->dose_score) : ""},
                {"val_dvh_score", val ? fmt_metric(val->dvh_score) : ""},
                {"val_pseudo_dice", val ? fmt_metric(val->pseudo_dice) : ""},
                {"val_pseudo_dice_ema", val ? fmt_metric(val->pseudo_dice_ema) : ""},
                {"best", improved ? "1" : "0"},
                {"epoch_seconds", fmt::format("{:.3f}", train.seconds)},
                {"data_seconds", fmt::format("{:.3f}", train.data_seconds)},
                {"data_share", fmt::format("{:.4f}", train.seconds > 0 ? train.data_seconds / train.seconds : 0.0)},
                {"samples_per_second", fmt::format("{:.3f}", sps)},
                {"skipped_steps", std::to_string(train.skipped)}});
  if (val) {
    const std::string dose = dose_eval_ ? fmt::format(" val_dose_score {:.4f} val_dvh_score {:.4f}", val->dose_score,
                                                      val->dvh_score)
                                        : "";
    const std::string pseudo = std::isfinite(val->pseudo_dice)
                                   ? fmt::format(" pseudo_dice {:.4f} (ema {:.4f})", val->pseudo_dice, val->pseudo_dice_ema)
                                   : "";
    const std::string metric = std::isfinite(val->metric) ? fmt::format(" {} {:.4f}", metric_.name, val->metric) : "";
    spdlog::info("epoch {}/{}: train_loss {:.5f} val_loss {:.5f}{}{}{}{} | {:.1f} s, {:.1f} samples/s, data wait "
                 "{:.1f} s ({:.0f}%)",
                 epoch, cfg_.training.epochs, train.train_loss, val->loss, metric, dose, pseudo,
                 improved ? " (best)" : "", train.seconds, sps, train.data_seconds,
                 train.seconds > 0 ? 100.0 * train.data_seconds / train.seconds : 0.0);
  } else {
    spdlog::info("epoch {}/{}: train_loss {:.5f} | {:.1f} s, {:.1f} samples/s, data wait {:.1f} s ({:.0f}%)", epoch,
                 cfg_.training.epochs, train.train_loss, train.seconds, sps, train.data_seconds,
                 train.seconds > 0 ? 100.0 * train.data_seconds / train.seconds : 0.0);
  }
  flush_logs();
}

}  // namespace u3d
