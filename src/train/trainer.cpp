#include "u3d/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "u3d/errors.h"
#include "u3d/files.h"
#include "u3d/optimizer.h"
#include "u3d/predictor.h"
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
      metric_{"val_metric", false} {}

Trainer::~Trainer() = default;

TrainState Trainer::fit() {
  prepare_run();
  setup_runtime();
  load_data();
  build_model();
  if (options_.resume) restore();
  record_run();
  print_banner();
  for (int64_t epoch = state_.epoch + 1; epoch <= cfg_.training.epochs; ++epoch) {
    const EpochStats stats = train_epoch(epoch);
    std::optional<ValStats> val;
    bool improved = false;
    const bool full_val = val_cache_ && cfg_.training.val_full &&
                          (epoch % cfg_.training.val_every == 0 || epoch == cfg_.training.epochs);
    if (full_val || val_sampler_) {
      val = full_val ? validate() : ValStats{};
      if (val_sampler_) validate_patches(epoch, *val);
      const Monitor monitor = monitored();
      const bool use_loss = monitor == Monitor::kValLoss;
      const double score = use_loss                              ? val->loss
                           : monitor == Monitor::kPseudoDice    ? val->pseudo_dice
                           : monitor == Monitor::kPseudoDiceEma ? val->pseudo_dice_ema
                                                                : val->metric;
      const bool pseudo = monitor == Monitor::kPseudoDice || monitor == Monitor::kPseudoDiceEma;
      improved = is_improvement(score, state_.best_metric, pseudo || (!use_loss && metric_.higher_is_better));
      if (improved) {
        state_.best_metric = score;
        state_.best_epoch = epoch;
      }
    }
    state_.epoch = epoch;
    state_.step_in_epoch = 0;
    save_checkpoints(epoch, improved);
    log_epoch(epoch, stats, val, improved);
  }
  spdlog::info("done: {} epochs, {} steps; best {} {} at epoch {}; run folder {}", state_.epoch, state_.global_step,
               monitored() == Monitor::kValLoss          ? std::string("val_loss")
               : monitored() == Monitor::kPseudoDice    ? std::string("val_pseudo_dice")
               : monitored() == Monitor::kPseudoDiceEma ? std::string("val_pseudo_dice_ema")
                                                        : metric_.name,
               fmt_metric(state_.best_metric), state_.best_epoch, paths_.root.string());
  flush_logs();
  return state_;
}

void Trainer::prepare_run() {
  ensure_writable_directory(paths_.root);
  ensure_writable_directory(paths_.checkpoints);
  if (!options_.resume && store_.latest()) {
    throw ConfigError(fmt::format("{} already holds checkpoints of a run named '{}'; continue it with --resume, or "
                                  "choose another experiment.name",
                                  paths_.checkpoints.string(), cfg_.experiment.name));
  }
  add_log_file(paths_.log);
}

void Trainer::record_run() const {
  write_file_atomic(paths_.config, fmt::format("# resolved config of run '{}' (trainer {} {})\n{}",
                                               cfg_.experiment.name, version(), git_commit(), to_yaml(cfg_)));
  if (!options_.resume) csv_->start_fresh();
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
  auto split_ids = [&](const std::string& key, const std::string& name) {
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
  metric_ = task_metric(info.task);
  train_cache_ = std::make_unique<TensorCache>(
      TensorCache::load(*reader_, split_ids("data.train_split", cfg_.data.train_split), *pre_, runtime_.threads));
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
  SamplerOptions so;
  so.patch = cfg_.data.patch_size;
  so.batch_size = cfg_.data.batch_size;
  so.seed = static_cast<uint64_t>(cfg_.experiment.seed);
  so.augment = cfg_.augment;
  so.foreground_fraction = cfg_.data.foreground_fraction;
  so.foreground = cfg_.data.foreground;
  so.channel_names = pre_->channel_names();
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
  state_.train_target_mean = train_cache_->target_mean();
  spdlog::info("data: {} ({}), {} train / {} val cases, {} input channels [{}], cache {} in {:.1f} s",
               cfg_.data.path, to_string(info.task), train_cache_->size(), val_cache_ ? val_cache_->size() : 0,
               pre_->in_channels(), fmt::join(pre_->channel_names(), ", "),
               human_bytes(static_cast<double>(train_cache_->bytes() + (val_cache_ ? val_cache_->bytes() : 0))),
               seconds_since(t0));
}

void Trainer::build_model() {
  torch::manual_seed(static_cast<uint64_t>(cfg_.experiment.seed));
  net_ = build_network(cfg_.model, pre_->in_channels(), pre_->out_channels());
  net_->to(runtime_.device);
  loss_ = std::make_unique<Loss>(resolve_loss(cfg_.training.loss, pre_->task(), train_cache_->has_masks()));
  optimizer_ = make_optimizer(cfg_.training, net_->parameters());
  schedule_ = std::make_unique<LrSchedule>(cfg_.training, cfg_.training.epochs * steps_per_epoch_);
  if (cfg_.model.deep_supervision && pre_->task() != Task::kSegmentation) {
    throw ConfigError("model.deep_supervision: needs a segmentation dataset (labels to down-sample)");
  }
  std::vector<std::string> columns{"epoch", "step", "lr", "train_loss", "val_loss", metric_.name, "best",
                                   "epoch_seconds", "data_seconds", "samples_per_second"};
  if (val_sampler_) columns.insert(columns.begin() + 6, {"val_pseudo_dice", "val_pseudo_dice_ema"});
  csv_ = std::make_unique<MetricsCsv>(paths_.metrics, columns);
}

void Trainer::restore() {
  const auto path = options_.resume->empty() ? store_.resolve("last") : store_.resolve(*options_.resume);
  const CheckpointInfo info = load_checkpoint(path, *net_, optimizer_.get(), runtime_.device, /*restore_rng=*/true);
  const Config saved = load_config_from_string(info.config_yaml, path.string() + " (config)");
  for (const auto& d : diff(saved, cfg_)) spdlog::warn("resume: config changed since the checkpoint: {}", d);
  state_ = info.state;
  csv_->resume(state_.epoch);
  spdlog::info("resume: {} (epoch {}, step {}, written by {} {} at {})", path.string(), state_.epoch,
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
  double loss_sum = 0;
  int64_t steps = 0;
  for (int64_t step = state_.step_in_epoch; step < steps_per_epoch_; ++step) {
    const double lr = schedule_->at(state_.global_step);
    set_learning_rate(*optimizer_, lr);
    const auto td = Clock::now();
    const Batch batch = sampler_->batch(epoch, step).to(runtime_.device);
    stats.data_seconds += seconds_since(td);

    optimizer_->zero_grad();
    torch::Tensor loss;
    if (cfg_.model.deep_supervision) {
      const std::vector<torch::Tensor> outs = net_->forward_deep(batch.image);  // finest first
      if (deep_weights_.size() != outs.size()) deep_weights_ = deep_supervision_weights(static_cast<int64_t>(outs.size()));
      loss = deep_supervision_loss(*loss_, outs, batch.target, deep_weights_);
    } else {
      loss = (*loss_)(net_->forward(batch.image), batch.target, batch.mask);
    }
    loss.backward();
    if (cfg_.training.grad_clip_norm > 0) {
      torch::nn::utils::clip_grad_norm_(net_->parameters(), cfg_.training.grad_clip_norm);
    }
    optimizer_->step();
    loss_sum += loss.item<double>();
    ++steps;
    ++state_.global_step;
    state_.step_in_epoch = step + 1;
    stats.samples += batch.image.size(0);

    if (cfg_.logging.progress_seconds > 0 && seconds_since(last_progress) >= cfg_.logging.progress_seconds &&
        step + 1 < steps_per_epoch_) {
      last_progress = Clock::now();
      const double elapsed = seconds_since(t0);
      const double per_step = elapsed / static_cast<double>(steps);
      spdlog::info("epoch {}/{} step {}/{} loss {:.5f} lr {:.3g} {:.1f} samples/s, epoch ends in {:.0f} s", epoch,
                   cfg_.training.epochs, step + 1, steps_per_epoch_, loss_sum / static_cast<double>(steps), lr,
                   static_cast<double>(stats.samples) / elapsed,
                   per_step * static_cast<double>(steps_per_epoch_ - step - 1));
    }
  }
  stats.seconds = seconds_since(t0);
  stats.train_loss = steps > 0 ? loss_sum / static_cast<double>(steps) : std::numeric_limits<double>::quiet_NaN();
  return stats;
}

ValStats Trainer::validate() {
  SlidingWindowOptions sw{cfg_.data.patch_size, cfg_.predict.overlap,
                          cfg_.predict.batch_size > 0 ? cfg_.predict.batch_size : cfg_.data.batch_size,
                          cfg_.predict.gaussian};
  std::vector<double> losses, metrics;
  for (const auto& c : val_cache_->cases()) {
    const torch::Tensor out = sliding_window_predict(*net_, c.image, sw, runtime_.device);  // (K, D, H, W)
    const torch::Tensor target = c.target.to(runtime_.device);
    const torch::Tensor mask = c.mask.defined() ? c.mask.unsqueeze(0).to(runtime_.device, torch::kFloat) : torch::Tensor();
    const torch::Tensor batch_target = pre_->task() == Task::kSegmentation ? target.unsqueeze(0).to(torch::kLong)
                                                                            : target.unsqueeze(0);
    losses.push_back((*loss_)(out.unsqueeze(0), batch_target, mask).item<double>());
    const torch::Tensor pred = finalize_prediction(out, *pre_).cpu();
    if (pre_->task() == Task::kSegmentation) {
      metrics.push_back(nan_mean(dice_per_class(pred, c.target, reader_->info().num_classes)));
    } else {
      metrics.push_back(masked_mae(pred, c.raw_target, c.mask.defined() ? c.mask[0] : torch::Tensor()));
    }
  }
  return ValStats{nan_mean(losses), nan_mean(metrics)};
}

void Trainer::validate_patches(int64_t epoch, ValStats& stats) {
  torch::NoGradGuard no_grad;
  const bool was_training = net_->is_training();
  net_->eval();
  const int64_t k = pre_->out_channels();
  std::vector<double> tp(static_cast<size_t>(k), 0.0), fp(tp), fn(tp);
  double loss_sum = 0;
  const int64_t batches = cfg_.training.val_patch_batches;
  for (int64_t b = 0; b < batches; ++b) {
    const Batch batch = val_sampler_->batch(epoch, b).to(runtime_.device);
    const torch::Tensor out = net_->forward(batch.image);  // (N, K, d, h, w) logits
    loss_sum += (*loss_)(out, batch.target, batch.mask).item<double>();
    const torch::Tensor pred = out.argmax(1);              // (N, d, h, w)
    for (int64_t c = 1; c < k; ++c) {
      const auto p = pred == c;
      const auto y = batch.target == c;
      tp[static_cast<size_t>(c)] += static_cast<double>((p & y).sum().item<int64_t>());
      fp[static_cast<size_t>(c)] += static_cast<double>((p & ~y).sum().item<int64_t>());
      fn[static_cast<size_t>(c)] += static_cast<double>((~p & y).sum().item<int64_t>());
    }
  }
  net_->train(was_training);
  std::vector<double> dice;
  for (int64_t c = 1; c < k; ++c) {
    const size_t i = static_cast<size_t>(c);
    const double denom = 2 * tp[i] + fp[i] + fn[i];
    dice.push_back(denom > 0 ? 2 * tp[i] / denom : std::numeric_limits<double>::quiet_NaN());
  }
  stats.pseudo_dice = nan_mean(dice);
  if (std::isfinite(stats.pseudo_dice)) {
    const double w = cfg_.training.pseudo_dice_ema;
    state_.pseudo_dice_ema = std::isfinite(state_.pseudo_dice_ema)
                                 ? w * state_.pseudo_dice_ema + (1.0 - w) * stats.pseudo_dice
                                 : stats.pseudo_dice;
  }
  stats.pseudo_dice_ema = state_.pseudo_dice_ema;
  if (!std::isfinite(stats.loss) && batches > 0) stats.loss = loss_sum / static_cast<double>(batches);
}

Monitor Trainer::monitored() const {
  if (cfg_.checkpoint.monitor != Monitor::kAuto) return cfg_.checkpoint.monitor;
  return cfg_.training.val_full ? Monitor::kValMetric : Monitor::kPseudoDiceEma;
}

CheckpointInfo Trainer::checkpoint_info() const {
  CheckpointInfo info;
  info.state = state_;
  info.config_yaml = to_yaml(cfg_);
  info.task = to_string(pre_->task());
  info.in_channels = pre_->in_channels();
  info.out_channels = pre_->out_channels();
  return info;
}

void Trainer::save_checkpoints(int64_t epoch, bool improved) {
  const CheckpointInfo info = checkpoint_info();
  if (epoch % cfg_.checkpoint.every_epochs == 0 || epoch == cfg_.training.epochs) {
    save_checkpoint(store_.periodic_path(epoch), info, *net_, optimizer_.get());
    store_.prune();
  }
  if (improved) save_checkpoint(store_.best_path(), info, *net_, optimizer_.get());
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
                {"val_pseudo_dice", val ? fmt_metric(val->pseudo_dice) : ""},
                {"val_pseudo_dice_ema", val ? fmt_metric(val->pseudo_dice_ema) : ""},
                {"best", improved ? "1" : "0"},
                {"epoch_seconds", fmt::format("{:.3f}", train.seconds)},
                {"data_seconds", fmt::format("{:.3f}", train.data_seconds)},
                {"samples_per_second", fmt::format("{:.3f}", sps)}});
  if (val) {
    const std::string pseudo = std::isfinite(val->pseudo_dice)
                                   ? fmt::format(" pseudo_dice {:.4f} (ema {:.4f})", val->pseudo_dice, val->pseudo_dice_ema)
                                   : "";
    const std::string metric = std::isfinite(val->metric) ? fmt::format(" {} {:.4f}", metric_.name, val->metric) : "";
    spdlog::info("epoch {}/{}: train_loss {:.5f} val_loss {:.5f}{}{}{} | {:.1f} s, {:.1f} samples/s", epoch,
                 cfg_.training.epochs, train.train_loss, val->loss, metric, pseudo, improved ? " (best)" : "",
                 train.seconds, sps);
  } else {
    spdlog::info("epoch {}/{}: train_loss {:.5f} | {:.1f} s, {:.1f} samples/s", epoch, cfg_.training.epochs,
                 train.train_loss, train.seconds, sps);
  }
  flush_logs();
}

}  // namespace u3d
