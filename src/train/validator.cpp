#include "u3d/train/validator.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/evaluate/dose_metrics.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/model/autocast.h"
#include "u3d/predict/postprocess.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/distributed.h"

namespace u3d {

namespace {

// How validation labels a segmentation output: a softmax head's argmax (predict.threshold is for
// written predictions), a sigmoid head's channels at predict.threshold (0: 0.5), as prediction does.
PostprocessOptions validation_labels(const Config& cfg) {
  if (cfg.model.head == Head::kSoftmax) return {};
  return PostprocessOptions{cfg.predict.threshold, /*min_component_size=*/0, Head::kSigmoid};
}

// The slow_val test fault: `ms` of sleep in slices, ended early by a stop signal (as a real case
// is, between its batches of windows).
void slow_down(int64_t ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until && !StopSignals::pending()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

Validator::Validator(const ResolvedConfig& rc, const TrainData& data, const DatasetReader& reader,
                     const torch::Device& device, int64_t threads, NetworkImpl& net, const Loss& loss,
                     bool channels_last, const TestFaults& faults, Distributed* dist)
    : rc_(rc),
      data_(data),
      reader_(reader),
      device_(device),
      net_(net),
      loss_(loss),
      channels_last_(channels_last),
      faults_(faults),
      dist_(dist) {
  if (rc.scores_dose()) {
    std::vector<std::string> names;
    for (const auto& s : rc.dvh_structures) names.push_back(s.name);
    dose_eval_ = std::make_unique<DoseEvaluator>(reader, rc.val_ids, rc.dvh_structures, threads);
    spdlog::info("validation: OpenKBP dose score and DVH score over {} structures ({})", names.size(),
                 fmt::join(names, ", "));
  }
}

Validator::~Validator() = default;

bool Validator::due(int64_t epoch) const { return rc_.full_validation_due(epoch) || data_.val_sampler(); }

ValStats Validator::run(int64_t epoch, TrainState& state, const std::function<bool()>& stopping) {
  const auto started = std::chrono::steady_clock::now();
  ValStats stats = rc_.full_validation_due(epoch) ? full_volumes(epoch, stopping) : ValStats{};
  if (stats.complete && data_.val_sampler()) patches(epoch, stats, state);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return stats;
}

ValStats Validator::full_volumes(int64_t epoch, const std::function<bool()>& stopping) {
  const Config& cfg = rc_.cfg;
  const Preprocessor& pre = data_.pre();
  // The windows of prediction (predictor.h), without mirroring; autocast as the training step.
  SlidingWindowOptions sw = window_options(cfg, cfg.data.patch_size, device_, channels_last_, /*mirror=*/false);
  // One process: a stop signal ends the case between batches of windows (a host-side check).
  // Data-parallel ranks finish their case, so every rank meets the round's stopping() collective.
  if (!dist_) sw.stop = [] { return StopSignals::pending() != 0; };
  // Per case, on the device: (1 + M,) float64, the loss and the metric's values (segmentation: the
  // Dice of each foreground class; regression: the MAE), read back once after the last case.
  std::vector<torch::Tensor> scores;
  std::vector<PatientDoseMetrics> dose_metrics;
  ValStats preview;  // its preview_* fields
  const auto& cases = data_.val_cache()->cases();
  const int64_t n = static_cast<int64_t>(cases.size());
  const int64_t rank = dist_ ? dist_->rank() : 0, world = dist_ ? dist_->world_size() : 1;
  const bool segmentation = pre.task() == Task::kSegmentation;
  const auto interrupted = [] {
    ValStats stats;
    stats.complete = false;
    return stats;
  };
  for (int64_t round = 0; round * world < n; ++round) {  // data-parallel: case round * W + rank
    if (progress_) progress_(std::min(round * world, n), n);
    if (stopping()) return interrupted();
    if (round * world + rank >= n) continue;
    const auto& c = cases[static_cast<size_t>(round * world + rank)];
    if (faults_.slow_val_ms > 0) slow_down(faults_.slow_val_ms);
    torch::Tensor out;  // (K, D, H, W)
    try {
      out = sliding_window_predict(net_, c.image, sw, device_);
    } catch (const StoppedError&) {  // sw.stop saw this process's signal
      stopping();                    // records it (one process: no collective)
      return interrupted();
    }
    // The val cache is page-locked on CUDA (TrainData): asynchronous copies.
    const torch::Tensor target = c.target.to(device_, /*non_blocking=*/true);
    const torch::Tensor mask =
        c.mask.defined() ? c.mask.unsqueeze(0).to(device_, torch::kFloat, /*non_blocking=*/true) : torch::Tensor();
    const torch::Tensor batch_target = segmentation ? target.unsqueeze(0).to(torch::kLong) : target.unsqueeze(0);
    const torch::Tensor case_loss = loss_(out.unsqueeze(0), batch_target, mask).detach().to(torch::kDouble).view({1});
    const torch::Tensor pred = segmentation ? labels_from_output(out, validation_labels(cfg))
                                            : finalize_prediction(out, pre);  // (D, H, W) on the device
    const torch::Tensor raw_target =
        c.raw_target.defined() ? c.raw_target.to(device_, /*non_blocking=*/true) : torch::Tensor();
    if (dose_eval_) {
      // On the device: the prediction in Gy, scored as its submission file would be.
      const torch::Tensor dose_mask = c.mask.defined() ? c.mask[0] : torch::ones_like(c.raw_target, torch::kUInt8);
      dose_metrics.push_back(
          dose_eval_->evaluate(c.id, pred, raw_target, dose_mask.to(device_, /*non_blocking=*/true)));
    }
    if (cfg.logging.tensorboard && preview.preview_case.empty()) {
      const int64_t mid = pred.size(0) / 2;
      preview.preview_case = c.id;
      preview.preview_input = c.image[0][mid].to(torch::kCPU, torch::kFloat);
      preview.preview_target = (segmentation ? c.target : c.raw_target)[mid].to(torch::kCPU, torch::kFloat);
      preview.preview_prediction = pred[mid].to(torch::kCPU, torch::kFloat);
    }
    torch::Tensor metric;
    if (segmentation) {
      // The ignore label's voxels count for no class: the prediction takes the label there too.
      const int64_t ignore = rc_.info.ignore_label;
      const torch::Tensor scored = ignore >= 0 ? pred.masked_fill(target == ignore, ignore) : pred;
      metric = dice_per_class_tensor(scored, target, rc_.info.num_classes);  // (K - 1,)
    } else {
      metric = masked_mae_tensor(pred, raw_target, mask.defined() ? mask[0][0] : torch::Tensor()).view({1});
    }
    scores.push_back(torch::cat({case_loss, metric}));
  }
  if (progress_) progress_(n, n);
  // The one host read of the epoch's losses and metrics.
  std::vector<double> losses, metrics;
  if (!scores.empty()) {
    const torch::Tensor host = torch::stack(scores).cpu();  // (cases of this rank, 1 + M) float64
    const auto h = host.accessor<double, 2>();
    for (int64_t i = 0; i < h.size(0); ++i) {
      losses.push_back(h[i][0]);
      std::vector<double> values;
      for (int64_t j = 1; j < h.size(1); ++j) values.push_back(h[i][j]);
      metrics.push_back(segmentation ? nan_mean(values) : values.at(0));
    }
  }
  if (faults_.nan_val.count(epoch)) return ValStats{};  // test fault: every value NaN
  ValStats stats = preview;
  if (!dist_) {
    stats.loss = nan_mean(losses);
    stats.metric = nan_mean(metrics);
    if (dose_eval_) {
      const DoseScores scores = dose_scores(dose_metrics);
      stats.dose_score = scores.dose_score;
      stats.dvh_score = scores.dvh_score;
    }
    return stats;
  }
  // The ranks' sums and counts of the finite values, reduced: the means over every val case.
  std::vector<double> sums(8, 0.0);
  auto add = [&](size_t at, double v) {
    if (!std::isfinite(v)) return;
    sums[at] += v;
    sums[at + 1] += 1;
  };
  for (double v : losses) add(0, v);
  for (double v : metrics) add(2, v);
  for (const auto& p : dose_metrics) {
    add(4, p.dose_error);
    for (const auto& e : p.dvh) add(6, e.abs_error());
  }
  sums = dist_->sum(sums);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto mean = [&](size_t at) { return sums[at + 1] > 0 ? sums[at] / sums[at + 1] : nan; };
  stats.loss = mean(0);
  stats.metric = mean(2);
  if (dose_eval_) {
    stats.dose_score = mean(4);
    stats.dvh_score = mean(6);
  }
  return stats;
}

void Validator::patches(int64_t epoch, ValStats& stats, TrainState& state) {
  torch::NoGradGuard no_grad;
  const bool was_training = net_.is_training();
  net_.eval();
  const int64_t k = data_.pre().out_channels();  // the classes (a sigmoid head has k - 1 channels)
  const PostprocessOptions labels = validation_labels(rc_.cfg);
  const auto autocast = inference_autocast(rc_.cfg, device_);  // as the training step
  // Device sums over every batch, read once: (K,) true positives, false positives, false negatives.
  const auto counts = torch::TensorOptions().dtype(torch::kLong).device(device_);
  torch::Tensor tp = torch::zeros({k}, counts), fp = torch::zeros({k}, counts), fn = torch::zeros({k}, counts);
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  const torch::Tensor classes = torch::arange(k, counts).view({1, k, 1, 1, 1});
  const int64_t batches = rc_.cfg.training.val_patch_batches;
  const int64_t first = dist_ ? dist_->rank() : 0, stride = dist_ ? dist_->world_size() : 1;
  for (int64_t b = first; b < batches; b += stride) {  // data-parallel: this rank's share of the batches
    if (progress_) progress_(b, batches);
    const Batch batch = data_.val_sampler()->batch(epoch, b).to(device_);
    torch::Tensor image = batch.image;
    if (channels_last_) image = image.contiguous(at::MemoryFormat::ChannelsLast3d);
    torch::Tensor out;  // (N, K, d, h, w) logits, float32
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(device_.type(), *autocast);
      out = net_.forward(image);
    }
    out = out.to(torch::kFloat);
    loss_sum.add_(loss_(out, batch.target, batch.mask, batch.maps).detach().to(torch::kDouble));
    torch::Tensor p = labels_from_output(out, labels, /*dim=*/1).unsqueeze(1) == classes;  // (N, K, d, h, w)
    const torch::Tensor y = batch.target.unsqueeze(1) == classes;
    if (rc_.info.ignore_label >= 0) p = p & (batch.target.unsqueeze(1) != rc_.info.ignore_label);  // voxels scored
    const std::vector<int64_t> dims = {0, 2, 3, 4};
    tp.add_((p & y).sum(dims));
    fp.add_((p & ~y).sum(dims));
    fn.add_((~p & y).sum(dims));
  }
  net_.train(was_training);
  torch::Tensor counts_all = torch::stack({tp, fp, fn});  // (3, K)
  if (dist_) {                                            // every rank's counts and losses summed
    counts_all = counts_all.to(dist_->comm_device()).contiguous();
    dist_->all_reduce_(counts_all);
    torch::Tensor l = loss_sum.reshape({1}).to(dist_->comm_device());
    dist_->all_reduce_(l);
    loss_sum = l.reshape({});
  }
  // The one host read: the counts (exact in float64) and the loss sum in one tensor.
  const torch::Tensor packed =
      torch::cat({counts_all.reshape({-1}).to(torch::kDouble), loss_sum.reshape({1}).to(counts_all.device())}).cpu();
  const torch::Tensor host = packed.narrow(0, 0, 3 * k).to(torch::kLong).view({3, k});
  const auto h = host.accessor<int64_t, 2>();
  const double loss_total = packed[3 * k].item<double>();
  std::vector<double> dice;
  for (int64_t c = 1; c < k; ++c) {
    const double denom = static_cast<double>(2 * h[0][c] + h[1][c] + h[2][c]);
    dice.push_back(denom > 0 ? 2.0 * static_cast<double>(h[0][c]) / denom : std::numeric_limits<double>::quiet_NaN());
  }
  stats.pseudo_dice_per_class = dice;
  stats.pseudo_dice = nan_mean(dice);
  if (std::isfinite(stats.pseudo_dice)) {
    const double w = rc_.cfg.training.pseudo_dice_ema;
    state.pseudo_dice_ema = std::isfinite(state.pseudo_dice_ema)
                                ? w * state.pseudo_dice_ema + (1.0 - w) * stats.pseudo_dice
                                : stats.pseudo_dice;
  }
  stats.pseudo_dice_ema = state.pseudo_dice_ema;
  if (!std::isfinite(stats.loss) && batches > 0) stats.loss = loss_total / static_cast<double>(batches);
}

double Validator::monitored(const ValStats& val) const {
  switch (rc_.monitor) {
    case Monitor::kValLoss: return val.loss;
    case Monitor::kValDoseScore: return val.dose_score;
    case Monitor::kValDvhScore: return val.dvh_score;
    case Monitor::kPseudoDice: return val.pseudo_dice;
    case Monitor::kPseudoDiceEma: return val.pseudo_dice_ema;
    case Monitor::kValMetric:
    case Monitor::kAuto: break;
  }
  return val.metric;
}

bool Validator::improves(const ValStats& val, int64_t epoch, TrainState& state) const {
  if (!rc_.monitor_measured(epoch)) return false;  // e.g. the pseudo-Dice only, the monitor a whole-volume value
  const double score = monitored(val);
  if (!std::isfinite(score)) {
    spdlog::warn("epoch {}: the validation {} is not finite; it is never taken as the best", epoch, rc_.monitor_name);
  }
  if (!is_improvement(score, state.best_metric, rc_.monitor_higher_is_better)) return false;
  state.best_metric = score;
  state.best_epoch = epoch;
  return true;
}

}  // namespace u3d
