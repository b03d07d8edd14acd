#include "u3d/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_head.h"
#include "u3d/core/signals.h"
#include "u3d/core/version.h"
#include "u3d/model/autocast.h"
#include "u3d/model/layout.h"
#include "u3d/train/resume.h"

namespace u3d {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

ResolvedConfig unresolved(Config cfg) {
  ResolvedConfig rc;
  rc.cfg = std::move(cfg);
  return rc;
}

}  // namespace

Trainer::Trainer(Config cfg, TrainOptions options)
    : options_(std::move(options)),
      rc_(unresolved(std::move(cfg))),
      paths_(rc_.cfg),
      keeper_(rc_.cfg, paths_),
      rules_(rc_) {}

Trainer::~Trainer() = default;

TrainState Trainer::fit() {
  // SIGINT/SIGTERM/SIGHUP: finish the step, checkpoint, exit 128 + signal.
  StopSignals signals(
      "the run stops after the current step, validation case or data case, writes a checkpoint if a step ran, "
      "and exits; a third signal exits at once");
  run_started_ = Clock::now();
  check_run_folder();
  setup_runtime();
  try {
    load_data();  // calls prepare_run() once every check has passed and the data is loaded
  } catch (const StoppedError&) {
    // A stop signal while the cases load (data/cache.h ends the load before the next case): the
    // line below says so; data-parallel ranks agree on it in stopping().
  }
  if (stopping()) {
    spdlog::info("stopped by {} before training started; nothing to save", StopSignals::name(stop_signal_));
    return state_;
  }
  build_model();
  if (options_.resume) restore();
  record_run();
  if (const std::string done = rules_.nothing_left(state_, options_.resume.has_value()); !done.empty()) {
    spdlog::info("nothing to train: {}", done);
    return finish();
  }
  for (int64_t epoch = state_.epoch + 1; epoch <= cfg().training.epochs && !stopping(); ++epoch) {
    const EpochStats stats = train_epoch(epoch);
    if (stop_signal_) break;                              // train_epoch wrote the checkpoint
    ranks_.sync_buffers(*net_);                           // data-parallel batch norm: rank 0's statistics everywhere
    const std::optional<ValStats> val = validate(epoch);  // none when not due
    if (val && !val->complete) {  // stopped during validation: the epoch's steps are done, its validation is not
      save_inside_epoch(epoch);
      break;
    }
    if (end_epoch(epoch, stats, val)) break;
  }
  return finish();
}

TrainState Trainer::finish() {
  if (log_) log_->clear_progress();
  if (stop_signal_) {
    ranks_.sync_buffers(*net_);
    keeper_.on_stop(state_, stop_signal_);
    ranks_.barrier();
  } else {
    keeper_.on_finish();
    if (log_) log_->done(run_position(state_), runtime_.device);
  }
  flush_logs();
  return state_;
}

bool Trainer::stopping() {
  if (stop_signal_) return true;
  // Data-parallel: a signal on any rank, rank 0's checkpoint clock (one host-side collective).
  const DataParallel::Agreed agreed = ranks_.agree(StopSignals::pending(), keeper_.due_inside_epoch());
  stop_signal_ = agreed.signal;
  save_due_ = agreed.save_due;
  return stop_signal_ != 0;
}

void Trainer::check_run_folder() const {
  if (!options_.resume && keeper_.store().latest()) {
    throw ConfigError(
        fmt::format("{} already holds checkpoints of a run named '{}'; continue it with --resume, or "
                    "choose another experiment.name",
                    paths_.checkpoints.string(), cfg().experiment.name));
  }
}

void Trainer::prepare_run() {
  ensure_writable_directory(paths_.root);
  ensure_writable_directory(paths_.checkpoints);
  keeper_.store().remove_stale_temporaries();  // left by a run killed while writing
  keeper_.store().tidy_manifest();             // and the manifest lines such a kill left
  remove_stale_temporaries(paths_.root);
  add_log_file(paths_.log);  // with the lines logged since the start
}

void Trainer::setup_runtime() {
  runtime_ = init_runtime(cfg());
  ranks_.join(options_.launch, cfg().training, runtime_.device);
}

void Trainer::load_data() {
  reader_ = open_dataset(cfg());
  rc_ = resolve(cfg(), *reader_, runtime_.device, ranks_.rank(), ranks_.world_size());
  if (Distributed* dist = ranks_.dist()) {
    // Every rank must train the same run on the same data: one line on every rank when not.
    dist->check_same("the resolved config", to_yaml(cfg()), "start every rank with the same --config and --set");
    dist->check_same("the training data",
                     fmt::format("{} train {} val {}", rc_.cases_sha256, rc_.train_ids.size(), rc_.val_ids.size()),
                     fmt::format("every rank must read the same {} (a shared file system)", cfg().data.path));
  }
  // The load can take minutes: say it starts (Ctrl-C stops it before the next case, data/cache.h).
  spdlog::info("data: loading {} train / {} val cases of {}", rc_.train_ids.size(),
               rc_.validates() ? rc_.val_ids.size() : 0, cfg().data.path);
  data_ = std::make_unique<TrainData>(rc_, *reader_, runtime_);
  state_.train_target_mean = data_->train_cache().target_mean();
  if (ranks_.main()) prepare_run();  // every check has passed: the run folder is used from here (rank 0 writes it)
}

void Trainer::build_model() {
  const Preprocessor& pre = data_->pre();
  torch::manual_seed(static_cast<uint64_t>(cfg().experiment.seed));
  net_ = build_network(cfg().model, pre.in_channels(), network_channels(cfg().model.head, pre.out_channels()));
  net_->to(runtime_.device);
  if (resolve_channels_last(cfg().model, runtime_.device)) to_channels_last(*net_);  // before the optimizer's moments
  const LossSpec loss_spec =
      resolve_loss(cfg().training.loss, pre.task(), data_->train_cache().has_masks(), cfg().model.head);
  loss_ = std::make_unique<Loss>(loss_spec, loss_options(cfg().training, rc_.info, cfg().model.head));
  optimizer_ = std::make_unique<Optimizer>(cfg().training, net_->parameters());
  monitor_ = std::make_unique<StepMonitor>(runtime_.device, static_cast<int64_t>(loss_->term_names().size()));
  busy_ = std::make_unique<GpuBusyClock>(runtime_.device);
  const Loss* step_loss = loss_.get();
  if (Distributed* dist = ranks_.dist()) {
    dist->broadcast_parameters(*net_);  // rank 0's initial weights, verified equal on every rank
    train_loss_ = std::make_unique<Loss>(
        loss_spec, data_parallel_loss_options(loss_options(cfg().training, rc_.info, cfg().model.head), *dist));
    step_loss = train_loss_.get();
    ranks_.sync_gradients(optimizer_->params());
    if (network_norm(cfg().model) == Norm::kBatch) {
      spdlog::warn(
          "data-parallel with batch norm: each rank normalises with its own batch's statistics (not synchronised); "
          "rank 0's running statistics are given to every rank before validation and each checkpoint");
    }
  }
  step_ = std::make_unique<TrainStep>(cfg(), runtime_.device, *net_, *step_loss, *optimizer_, monitor_.get());
  if (ranks_.active()) step_->set_data_parallel(ranks_.gradients(), ranks_.dist());
  faults_.arm(*step_, state_);         // inf_grad@N
  std::function<void()> bounded_wait;  // no NCCL watchdog watches a replay's collectives: host reads bound their wait
  if (ranks_.active() && step_->features().cuda_graph)
    bounded_wait = [d = ranks_.dist()] { d->wait_for_device("waiting for the device's replayed steps"); };
  monitor_->set_before_read(bounded_wait);
  std::string why;  // data.cache: gpu: capture the sampling with the step, so one replay is one whole step
  if (std::function<Batch()> source = data_->loader().capturable(&why);
      (source || !why.empty()) && step_->features().cuda_graph) {
    if (faults_.active()) {
      why = "test fault injection is active";
    } else if (source) {
      sampling_in_graph_ = step_->set_batch_source(std::move(source));
    }
    if (!sampling_in_graph_) spdlog::info("training step: GPU sampling runs outside the CUDA graph: {}", why);
  }
  schedule_ = std::make_unique<LrSchedule>(cfg().training, cfg().training.epochs * rc_.steps_per_epoch);
  validator_ = std::make_unique<Validator>(rc_, *data_, *reader_, runtime_.device, runtime_.threads, *net_, *loss_,
                                           step_->features().channels_last, faults_.faults(), ranks_.dist());
  if (ranks_.main()) log_ = std::make_unique<RunLog>(run_log_settings(rc_), paths_);
  if (log_) log_->set_before_read(bounded_wait);
  keeper_.set_writes(ranks_.main());  // other ranks keep the cadence, rank 0 writes
  keeper_.set_writer(
      [this](const std::filesystem::path& path) { save_checkpoint(path, checkpoint_info(), *net_, optimizer_.get()); });
}

void Trainer::restore() {
  check_allow_patterns(options_.allow_config_change);
  const auto& store = keeper_.store();
  const auto path = options_.resume->empty() ? store.resolve("last") : store.resolve(*options_.resume);
  const CheckpointInfo saved_info = read_checkpoint_info(path);
  const Config saved = load_config_from_string(saved_info.config_yaml, path.string() + " (config)");
  check_config_drift(saved, cfg(), options_.allow_config_change, path.string());
  if (saved_info.sampler.cases_sha256 != rc_.cases_sha256 && !key_matches("data.path", options_.allow_config_change) &&
      !key_matches("data.train_split", options_.allow_config_change)) {
    throw ConfigError(fmt::format(
        "resume: the training split '{}' of {} is not the one {} was trained on ({} cases "
        "then, {} now, or other case ids); the sampler would draw other batches. Accept "
        "it with --allow-config-change data.path",
        cfg().data.train_split, cfg().data.path, path.string(), saved_info.sampler.cases, data_->train_cache().size()));
  }
  const CheckpointInfo info = load_checkpoint(path, *net_, optimizer_.get(), runtime_.device, /*restore_rng=*/true);
  // The checkpoint's strides come with its tensors (contiguous from a CPU run, say): back to this
  // run's layout, gradients and optimizer state with them.
  set_layout(*net_, step_->features().channels_last);
  optimizer_->match_parameter_layout();
  state_ = info.state;
  if (state_.step_in_epoch > rc_.steps_per_epoch) state_.step_in_epoch = rc_.steps_per_epoch;
  monitor_->restore(state_);
  // The scaler's state when the saved run had one: fp16, or auto resolved to fp16 (a batch-norm
  // network on CUDA; a checkpoint written without a scaler holds scale 1): else a fresh scaler.
  const bool saved_fp16 =
      saved.training.precision == Precision::kFp16 ||
      (saved.training.precision == Precision::kAuto && state_.loss_scale != 1.0 &&
       resolve_precision(saved.training, network_norm(saved.model), runtime_.device) == Precision::kFp16);
  if (step_->scaler() && saved_fp16) {
    step_->scaler()->load(state_.loss_scale, state_.loss_scale_growth);
  }
  keeper_.resumed_at(state_.global_step);
  if (const int64_t world = ranks_.world_size(); saved_info.sampler.world_size != world) {
    spdlog::warn(
        "resume: {} was written by {} process(es), this run has {}: another global batch, so the sample "
        "order from here differs from an uninterrupted run",
        path.string(), saved_info.sampler.world_size, world);
  }
  spdlog::info("resume: {} ({}, global step {}; written by trainer {} {} at {})", path.string(),
               state_.step_in_epoch > 0
                   ? fmt::format("inside epoch {} after step {}", state_.epoch + 1, state_.step_in_epoch)
                   : fmt::format("end of epoch {}", state_.epoch),
               state_.global_step, info.version, info.commit, info.created);
}

void Trainer::record_run() {
  carried_run_seconds_ = state_.run_seconds;  // the processes before a resume
  if (ranks_.active()) {
    const int64_t per_rank = cfg().data.batch_size * cfg().training.accumulate_steps;
    spdlog::info(
        "data-parallel: {} ranks x {} samples per step = global batch {} ({} steps per epoch; samples/s "
        "count every rank)",
        ranks_.world_size(), per_rank, per_rank * ranks_.world_size(), rc_.steps_per_epoch);
  }
  if (!ranks_.main()) return;  // rank 0 writes the run folder
  write_file_atomic(paths_.config, fmt::format("# resolved config of run '{}' (trainer {} {})\n{}",
                                               cfg().experiment.name, version(), git_commit(), to_yaml(cfg())));
  log_->begin(options_.resume ? std::optional<RunPosition>(run_position(state_)) : std::nullopt);
  // A named loss as resolved (auto -> dice_ce); a list as written.
  const std::string loss = loss_->term_names().empty() ? to_string(loss_->kind()) : get_value(cfg(), "training.loss");
  log_->banner(runtime_, count_parameters(*net_), loss);
}

EpochStats Trainer::train_epoch(int64_t epoch) {
  net_->train();
  epoch_started_ = Clock::now();
  busy_->start_epoch();
  if (log_) log_->start_epoch(state_.step_in_epoch);  // > 0 when resumed inside the epoch
  // The epoch's time in the processes before a resume (its row reports the whole epoch, also when
  // a stop came after its last step, during validation).
  const double carried_seconds = state_.epoch_seconds, carried_data_seconds = state_.epoch_data_seconds;
  EpochPosition at;  // samples and data_seconds: since this process started the epoch
  try {
    for (int64_t step = state_.step_in_epoch; step < rc_.steps_per_epoch; ++step) {
      at.lr = schedule_->at(state_.global_step);
      optimizer_->set_lr(at.lr);
      const torch::Tensor loss = optimizer_step(epoch, step, at.data_seconds);
      if (!first_step_done_) first_step_done(loss);
      ++state_.global_step;
      state_.step_in_epoch = at.step = step + 1;
      state_.epoch_samples += global_batch();
      at.samples += global_batch();
      state_.epoch_seconds = carried_seconds + seconds_since(epoch_started_);
      state_.epoch_data_seconds = carried_data_seconds + at.data_seconds;
      after_step(epoch, loss, at);
      if (stopping()) {
        save_inside_epoch(epoch);
        break;
      }
      if (save_due_ && step + 1 < rc_.steps_per_epoch) save_inside_epoch(epoch);  // stopping() read the clock
    }
  } catch (const std::exception& e) {
    rethrow(
        e, out_of_memory_message(cfg(), runtime_.device, "training step", precision_name(step_->features().precision)));
  }
  return epoch_stats(carried_seconds, at.data_seconds);
}

torch::Tensor Trainer::optimizer_step(int64_t epoch, int64_t step, double& data_seconds) {
  const int64_t micro_steps = cfg().training.accumulate_steps;
  BatchLoader& loader = data_->loader();
  if (sampling_in_graph_) {  // GPU sampler and step in one graph replay: no batch to wait for
    loader.seek(epoch, step * micro_steps);
    busy_->begin_step();
    const torch::Tensor loss = step_->run_sampled();
    busy_->end_step();
    last_found_inf_ = step_->found_inf();
    return loss;
  }
  // Micro-batch m of this optimizer step is the loader's batch step * micro_steps + m, drawn when
  // the step asks for it and kept until the step ends (a graph fallback asks again).
  std::vector<Batch> drawn;
  auto draw = [&](int64_t m) {
    while (static_cast<int64_t>(drawn.size()) <= m) {
      const int64_t k = static_cast<int64_t>(drawn.size());
      const double waited = loader.wait_seconds();
      Batch batch = loader.next(epoch, step * micro_steps + k);  // ready on the device; blocks only while none is
      data_seconds += loader.wait_seconds() - waited;
      faults_.on_batch(batch, k, state_.global_step + 1);  // nan_batch@N, stop_micro@N
      drawn.push_back(std::move(batch));
    }
    return drawn[static_cast<size_t>(m)];
  };
  draw(0);  // the first batch before the GPU busy clock starts: a wait for data is never GPU time
  busy_->begin_step();
  const torch::Tensor loss = train_step(draw);
  busy_->end_step();
  return loss;
}

void Trainer::after_step(int64_t epoch, const torch::Tensor& loss, EpochPosition at) {
  if (log_) log_->step(state_.global_step, epoch, at.step, at.lr, loss, last_found_inf_);
  if (state_.global_step % cfg().training.max_nonfinite_steps == 0) check_nonfinite();
  if (!log_ || !(log_->progress_due() || (at.step == rc_.steps_per_epoch && log_->shows_bar()))) return;  // N/N shown
  // An asynchronous snapshot: the newest whose copy has completed (CUDA), never a wait.
  monitor_->request(state_.step_in_epoch);
  const StepMonitor::Snapshot snapshot = monitor_->latest();
  const int64_t counted = snapshot.steps - snapshot.totals.skipped;
  at.epoch = epoch;
  at.loss = counted > 0 ? snapshot.totals.loss_sum / static_cast<double>(counted) : std::nan("");
  at.skipped = snapshot.totals.skipped;
  at.gpu_busy = busy_->share_so_far();  // the completed steps' events, never waited for
  log_->progress(at, runtime_.device);
}

EpochStats Trainer::epoch_stats(double carried_seconds, double data_seconds) {
  check_nonfinite();
  const auto totals = monitor_->totals();  // synchronises: every step's busy events have completed
  const int64_t counted = state_.step_in_epoch - totals.skipped;
  const double here = seconds_since(epoch_started_);
  state_.epoch_seconds = carried_seconds + here;
  EpochStats stats;
  stats.time.gpu = busy_->epoch_seconds();
  stats.time.training = here;
  stats.time.data_wait = data_seconds;
  stats.time.checkpoint = checkpoint_seconds_;
  stats.seconds = state_.epoch_seconds;
  stats.data_seconds = state_.epoch_data_seconds;
  stats.samples = state_.epoch_samples;
  stats.skipped = totals.skipped;
  stats.train_loss =
      counted > 0 ? totals.loss_sum / static_cast<double>(counted) : std::numeric_limits<double>::quiet_NaN();
  for (double sum : totals.term_sums) {
    stats.term_losses.push_back(counted > 0 ? sum / static_cast<double>(counted)
                                            : std::numeric_limits<double>::quiet_NaN());
  }
  return stats;
}

void Trainer::first_step_done(const torch::Tensor& loss) {
  first_step_done_ = true;
  if (!log_) return;
  // Once per process: waits for the first step (autotuning, capture) to end; not data-parallel, where
  // no watchdog bounds a host read of a replay's collectives (the host's time is logged there).
  if (!ranks_.active()) (void)loss.item<float>();
  log_->first_step();
}

torch::Tensor Trainer::train_step(const Batch& batch) {
  const torch::Tensor loss = step_->run(batch);
  last_found_inf_ = step_->found_inf();
  return loss;
}

torch::Tensor Trainer::train_step(const MicroBatches& micro) {
  const torch::Tensor loss = step_->run(micro);  // train_step.h: eager or a replayed CUDA graph
  last_found_inf_ = step_->found_inf();
  return loss;
}

std::optional<ValStats> Trainer::validate(int64_t epoch) {
  if (!validator_->due(epoch)) return std::nullopt;
  try {
    const auto started = Clock::now();
    validator_->set_progress([this, epoch](int64_t done, int64_t total) {
      if (log_) log_->validation_progress(epoch, done, total);  // the status line's validating phase
    });
    std::optional<ValStats> val = validator_->run(epoch, state_, [this] { return stopping(); });
    if (rc_.full_validation_due(epoch)) validation_seconds_ = seconds_since(started);
    if (log_ && val->complete) log_->validated(rc_.full_validation_due(epoch), val->seconds);  // the run's ETA
    return val;
  } catch (const std::exception& e) {
    rethrow(e, out_of_memory_message(cfg(), runtime_.device, "validation"));
  }
}

void Trainer::rethrow(const std::exception& e, const std::string& out_of_memory) const {
  if (!is_out_of_memory(e)) throw;  // the exception being handled, as it is
  throw TrainingError(out_of_memory + "; " + keeper_.last_checkpoint_note());
}

bool Trainer::end_epoch(int64_t epoch, const EpochStats& stats, const std::optional<ValStats>& val) {
  const bool improved = val && validator_->improves(*val, epoch, state_);
  state_.epoch = epoch;
  state_.step_in_epoch = 0;
  state_.epoch_samples = 0;
  state_.epoch_seconds = 0;
  state_.epoch_data_seconds = 0;
  monitor_->start_epoch();  // a checkpoint at an epoch boundary holds empty epoch sums
  // The metrics row first, then the checkpoint: a kill in between leaves a row newer than the
  // newest checkpoint, which the resume drops and writes again (never a missing row).
  if (log_) {
    log_->epoch(epoch, state_.global_step, stats, val, improved,
                schedule_->at(std::max<int64_t>(0, state_.global_step - 1)));
  }
  state_.run_seconds = carried_run_seconds_ + seconds_since(run_started_);
  const double next_epoch = rules_.next_epoch_seconds(epoch, seconds_since(epoch_started_), validation_seconds_);
  std::string rule = rules_.after_epoch(epoch, next_epoch, state_);
  const bool stop_here = ranks_.rank0_decides(!rule.empty());  // data-parallel: the clock is rank 0's
  if (!stop_here) rule.clear();
  if (stop_here && rule.empty()) rule = "rank 0's stopping rule";
  if (log_) log_->checkpointing(epoch);
  const auto checkpoint_started = Clock::now();
  keeper_.at_epoch_end(epoch, state_.global_step, improved, /*last=*/!rule.empty());
  checkpoint_seconds_ = seconds_since(checkpoint_started);  // the next epoch's wall time counts it
  if (log_) log_->checkpointed(checkpoint_seconds_);        // the run's ETA counts it for each epoch left
  ranks_.barrier();
  if (!rule.empty()) spdlog::info("stopping after epoch {} of {}: {}", epoch, cfg().training.epochs, rule);
  return !rule.empty();
}

void Trainer::check_nonfinite() {
  const auto totals = monitor_->totals();
  if (totals.longest_run < cfg().training.max_nonfinite_steps) {
    monitor_->reset_longest_run();
    return;
  }
  throw TrainingError(fmt::format(
      "training stopped at global step {}: {} steps in a row had a non-finite loss or gradient norm (NaN/Inf; each "
      "was skipped, weights unchanged; training.max_nonfinite_steps = {}); {} skipped in total; {}. Lower training.lr, "
      "set training.grad_clip_norm, or check the data (trainer check-data {})",
      state_.global_step, totals.longest_run, cfg().training.max_nonfinite_steps, totals.skipped_total,
      keeper_.last_checkpoint_note(), cfg().data.path));
}

void Trainer::save_inside_epoch(int64_t epoch) {
  check_nonfinite();
  ranks_.sync_buffers(*net_);
  keeper_.inside_epoch(epoch, state_.step_in_epoch, state_.global_step);
  ranks_.barrier();
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
  info.sampler.seed = cfg().experiment.seed;
  info.sampler.batch_size = cfg().data.batch_size;
  info.sampler.epoch = state_.epoch + 1;
  info.sampler.world_size = ranks_.world_size();
  info.sampler.next_sample =
      state_.step_in_epoch * cfg().data.batch_size * cfg().training.accumulate_steps * info.sampler.world_size;
  info.sampler.cases = data_->train_cache().size();
  info.sampler.cases_sha256 = rc_.cases_sha256;
  info.config_yaml = to_yaml(cfg());
  info.task = to_string(data_->pre().task());
  info.in_channels = data_->pre().in_channels();
  info.out_channels = data_->pre().out_channels();
  return info;
}

}  // namespace u3d
