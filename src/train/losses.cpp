#include "u3d/train/losses.h"

#include <algorithm>
#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/kernels/fused_families.h"
#include "u3d/kernels/fused_loss.h"
#include "u3d/train/topology_losses.h"

namespace u3d {

torch::Tensor l1_loss(const torch::Tensor& pred, const torch::Tensor& target) { return (pred - target).abs().mean(); }

torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask,
                             const torch::Tensor& count) {
  const auto m = mask.to(pred.scalar_type());
  return ((pred - target).abs() * m).sum() / (count.defined() ? count : m.sum()).clamp_min(1.0);
}

torch::Tensor mse_loss(const torch::Tensor& pred, const torch::Tensor& target) {
  return (pred - target).square().mean();
}

torch::Tensor masked_mse_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask,
                              const torch::Tensor& count) {
  const auto m = mask.to(pred.scalar_type());
  return ((pred - target).square() * m).sum() / (count.defined() ? count : m.sum()).clamp_min(1.0);
}

torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, double smooth) {
  const int64_t k = logits.size(1);
  const auto probs = torch::softmax(logits.to(torch::kFloat), /*dim=*/1);                        // (N, K, ...)
  const auto onehot = one_hot_labels(labels, k, torch::kFloat, logits.suggest_memory_format());  // (N, K, ...)
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < logits.dim(); ++d) spatial.push_back(d);
  const auto inter = (probs * onehot).sum(spatial);             // (N, K)
  const auto denom = probs.sum(spatial) + onehot.sum(spatial);  // (N, K)
  return dice_loss_from_sums(inter, denom, smooth, /*first=*/1);
}

torch::Tensor dice_loss_from_sums(const torch::Tensor& inter, const torch::Tensor& denom, double smooth,
                                  int64_t first) {
  const auto dice = (2.0 * inter + smooth) / (denom + smooth);
  return 1.0 - (first == 0 ? dice : dice.slice(/*dim=*/1, first)).mean();
}

torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  if (logits.is_cuda() && at::globalContext().deterministicAlgorithms()) {
    return cross_entropy_loss_deterministic(logits, labels);
  }
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

torch::Tensor cross_entropy_loss_deterministic(const torch::Tensor& logits, const torch::Tensor& labels) {
  const int64_t k = logits.size(1);
  const torch::Tensor log_p = torch::log_softmax(logits.to(torch::kFloat), /*dim=*/1);  // (N, K, ...)
  const torch::Tensor onehot = one_hot_labels(labels, k, torch::kFloat, logits.suggest_memory_format());
  return -(log_p * onehot).sum(/*dim=*/1).mean();
}

torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return u3d::cross_entropy_loss(logits, labels) + u3d::soft_dice_loss(logits, labels);
}

namespace {

// Labels (N, ...) -> (N, C, ...) float {0, 1}: channel c is labels == c + 1 (the sigmoid head's targets).
torch::Tensor sigmoid_targets(const torch::Tensor& logits, const torch::Tensor& labels) {
  return one_hot_labels(labels, logits.size(1) + 1, torch::kFloat, logits.suggest_memory_format())
      .slice(/*dim=*/1, /*start=*/1);
}

}  // namespace

torch::Tensor sigmoid_bce_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid) {
  const torch::Tensor x = logits.to(torch::kFloat);
  const torch::Tensor y = sigmoid_targets(x, labels);
  namespace F = torch::nn::functional;
  if (!valid.defined()) return F::binary_cross_entropy_with_logits(x, y);
  const torch::Tensor per_voxel =
      F::binary_cross_entropy_with_logits(x, y, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
  const torch::Tensor v = valid.unsqueeze(1).to(torch::kFloat);  // (N, 1, ...)
  return (per_voxel * v).sum() / (v.sum() * static_cast<double>(x.size(1))).clamp_min(1.0);
}

torch::Tensor sigmoid_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                                double smooth) {
  torch::Tensor p = torch::sigmoid(logits.to(torch::kFloat));  // (N, C, ...)
  torch::Tensor y = sigmoid_targets(p, labels);
  if (valid.defined()) {
    const torch::Tensor v = valid.unsqueeze(1).to(torch::kFloat);
    p = p * v;
    y = y * v;
  }
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < logits.dim(); ++d) spatial.push_back(d);
  const torch::Tensor inter = (p * y).sum(spatial);             // (N, C)
  const torch::Tensor denom = p.sum(spatial) + y.sum(spatial);  // (N, C)
  return dice_loss_from_sums(inter, denom, smooth, /*first=*/0);
}

LossKind resolve_loss(LossKind kind, Task task, bool has_mask) {
  if (kind == LossKind::kAuto) {
    if (task == Task::kSegmentation) return LossKind::kDiceCe;
    return has_mask ? LossKind::kMaskedL1 : LossKind::kL1;
  }
  const bool seg_loss = kind == LossKind::kDiceCe || kind == LossKind::kCe || kind == LossKind::kBce;
  if (seg_loss != (task == Task::kSegmentation)) {
    throw ConfigError(fmt::format("training.loss: {} does not fit a {} dataset; use {}", to_string(kind),
                                  to_string(task),
                                  task == Task::kSegmentation ? "dice_ce|ce|bce" : "l1|masked_l1|mse|masked_mse"));
  }
  if ((kind == LossKind::kMaskedL1 || kind == LossKind::kMaskedMse) && !has_mask) {
    throw ConfigError(
        fmt::format("training.loss: {} needs a loss mask, but the training cases have none", to_string(kind)));
  }
  return kind;
}

std::vector<double> deep_supervision_weights(int64_t outputs) {
  std::vector<double> w;
  for (int64_t i = 0; i < outputs; ++i) w.push_back(1.0 / static_cast<double>(int64_t{1} << i));
  if (outputs >= 2) w.back() = 0.0;
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v /= sum;
  return w;
}

torch::Tensor downsample_labels(const torch::Tensor& labels, const std::array<int64_t, 3>& factor) {
  torch::Tensor out = labels;
  const int64_t first = labels.dim() - 3;  // spatial axes are the last three
  for (int a = 0; a < 3; ++a) {
    const int64_t f = factor[static_cast<size_t>(a)];
    if (f > 1) out = out.slice(first + a, /*start=*/f / 2, /*end=*/c10::nullopt, /*step=*/f);
  }
  return out.contiguous();
}

LossParts deep_supervision_parts(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                 const torch::Tensor& labels, const std::vector<double>& weights,
                                 const TruthMaps& maps) {
  if (outputs.size() != weights.size()) {
    throw ConfigError(fmt::format("deep supervision: {} outputs but {} weights", outputs.size(), weights.size()));
  }
  LossParts sum;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (weights[i] == 0) continue;
    std::array<int64_t, 3> factor{};
    for (int a = 0; a < 3; ++a)
      factor[static_cast<size_t>(a)] = labels.size(labels.dim() - 3 + a) / outputs[i].size(2 + a);
    const LossParts p =
        loss.parts(outputs[i], downsample_labels(labels, factor), torch::Tensor(), downsample_maps(maps, factor));
    const torch::Tensor total = p.total * weights[i];
    sum.total = sum.total.defined() ? sum.total + total : total;
    if (p.terms.defined()) {
      const torch::Tensor terms = p.terms * weights[i];
      sum.terms = sum.terms.defined() ? sum.terms + terms : terms;
    }
  }
  return sum;
}

torch::Tensor deep_supervision_loss(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                    const torch::Tensor& labels, const std::vector<double>& weights) {
  return deep_supervision_parts(loss, outputs, labels, weights).total;
}

namespace {

bool is_segmentation_term(const std::string& name) {
  return name == "ce" || name == "dice" || name == "cldice" || name == "skeleton_recall" || name == "boundary" ||
         name == "bce";
}

}  // namespace

LossSpec resolve_loss(const LossSpec& spec, Task task, bool has_mask, Head head) {
  if (head == Head::kSigmoid && task != Task::kSegmentation) {
    throw ConfigError(
        fmt::format("model.head: sigmoid applies to segmentation datasets; this one is {} (set it to "
                    "softmax, the default, for a regression head)",
                    to_string(task)));
  }
  if (head == Head::kSigmoid && !spec.is_list() && spec.kind == LossKind::kAuto) {
    LossSpec both;  // nnU-Net's region-based training: BCE + Dice
    both.terms = {LossTerm{"bce", 1.0}, LossTerm{"dice", 1.0}};
    return both;
  }
  if (!spec.is_list()) return LossSpec(resolve_loss(spec.kind, task, has_mask));
  for (const auto& t : spec.terms) {
    if (is_segmentation_term(t.name) != (task == Task::kSegmentation)) {
      throw ConfigError(fmt::format("training.loss: term '{}' does not fit a {} dataset; use {}", t.name,
                                    to_string(task),
                                    task == Task::kSegmentation ? "ce, dice, cldice, skeleton_recall, boundary, bce"
                                                                : "l1, masked_l1, mse, masked_mse"));
    }
    if ((t.name == "masked_l1" || t.name == "masked_mse") && !has_mask) {
      throw ConfigError(
          fmt::format("training.loss: term '{}' needs a loss mask, but the training cases have none", t.name));
    }
  }
  return spec;
}

LossOptions loss_options(const TrainingConfig& training, const DatasetInfo& info, Head head) {
  LossOptions o;
  o.sigmoid = head == Head::kSigmoid;
  if (info.task == Task::kSegmentation) {
    o.ignore_label = info.ignore_label;
    if (!training.class_weights.empty() && static_cast<int64_t>(training.class_weights.size()) != info.num_classes) {
      throw ConfigError(fmt::format("training.class_weights: {} weights for a dataset of {} classes ({})",
                                    training.class_weights.size(), info.num_classes,
                                    fmt::join(info.class_names, ", ")));
    }
    o.class_weights = training.class_weights;
  }
  o.skeleton_iterations = training.skeleton_iterations;
  o.boundary_distance = training.boundary_distance;
  return o;
}

Loss::Loss(LossKind kind, LossOptions options) : Loss(LossSpec(kind), std::move(options)) {}

Loss::Loss(const LossSpec& spec, LossOptions options) : options_(std::move(options)) {
  if (!spec.is_list()) {
    kind_ = spec.kind;
    switch (spec.kind) {
      case LossKind::kL1: terms_ = {{Term::kL1, 1.0}}; break;
      case LossKind::kMaskedL1: terms_ = {{Term::kMaskedL1, 1.0}}; break;
      case LossKind::kMse: terms_ = {{Term::kMse, 1.0}}; break;
      case LossKind::kMaskedMse: terms_ = {{Term::kMaskedMse, 1.0}}; break;
      case LossKind::kDiceCe: terms_ = {{Term::kCe, 1.0}, {Term::kDice, 1.0}}; break;
      case LossKind::kCe: terms_ = {{Term::kCe, 1.0}}; break;
      case LossKind::kBce: terms_ = {{Term::kBce, 1.0}}; break;
      case LossKind::kAuto: throw ConfigError("training.loss: auto must be resolved before use");
    }
    return;
  }
  static const std::vector<std::pair<std::string, Term>> names = {{"ce", Term::kCe},
                                                                  {"dice", Term::kDice},
                                                                  {"cldice", Term::kClDice},
                                                                  {"skeleton_recall", Term::kSkeletonRecall},
                                                                  {"boundary", Term::kBoundary},
                                                                  {"bce", Term::kBce},
                                                                  {"l1", Term::kL1},
                                                                  {"masked_l1", Term::kMaskedL1},
                                                                  {"mse", Term::kMse},
                                                                  {"masked_mse", Term::kMaskedMse}};
  for (const auto& t : spec.terms) {
    const auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == t.name; });
    if (it == names.end()) throw ConfigError(fmt::format("training.loss: unknown term '{}'", t.name));
    terms_.emplace_back(it->second, t.weight);
    logged_.push_back(t.name);
  }
}

torch::Tensor Loss::term(Term t, const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                         const torch::Tensor& valid, const TruthMaps& maps) const {
  switch (t) {
    case Term::kL1: return u3d::l1_loss(output, target);
    case Term::kMaskedL1: return u3d::masked_l1_loss(output, target, mask, rank_mean_count(mask));
    case Term::kMse: return u3d::mse_loss(output, target);
    case Term::kMaskedMse: return u3d::masked_mse_loss(output, target, mask, rank_mean_count(mask));
    case Term::kCe:
      // Without an ignore label or class weights: the value dice_ce always had, bit for bit.
      if (!valid.defined() && options_.class_weights.empty()) return u3d::cross_entropy_loss(output, target);
      return u3d::weighted_cross_entropy(output, target, valid, options_.class_weights, options_.rank_sum);
    case Term::kBce: return u3d::sigmoid_bce_loss(output, target, valid);
    case Term::kDice:
      if (options_.sigmoid) return u3d::sigmoid_dice_loss(output, target, valid);
      if (!valid.defined()) return u3d::soft_dice_loss(output, target);
      return u3d::masked_soft_dice_loss(output, target, valid);
    case Term::kClDice:
      return u3d::cldice_loss(output, target, valid, options_.skeleton_iterations, kSkeletonSmooth, options_.rank_sum);
    case Term::kSkeletonRecall:
      if (maps.skeleton.defined()) {  // the cache's: (N, d, h, w) class per voxel -> (N, K-1, d, h, w)
        const torch::Tensor s = one_hot_labels(maps.skeleton, output.size(1), torch::kFloat);
        return u3d::skeleton_recall_given(output, s.slice(/*dim=*/1, /*start=*/1), valid, kSkeletonSmooth,
                                          options_.rank_sum);
      }
      return u3d::skeleton_recall_loss(output, target, valid, options_.skeleton_iterations, kSkeletonSmooth,
                                       options_.rank_sum);
    case Term::kBoundary:
      if (maps.distance.defined()) {
        const auto d = static_cast<double>(options_.boundary_distance);
        return u3d::boundary_loss_given(output, (maps.distance / d).clamp(-1.0, 1.0), valid, options_.rank_sum);
      }
      return u3d::boundary_loss(output, target, valid, options_.boundary_distance, options_.rank_sum);
  }
  throw ConfigError("training.loss: unknown term");
}

torch::Tensor Loss::rank_mean_count(const torch::Tensor& mask) const {
  if (!options_.rank_mean) return {};
  return options_.rank_mean(mask.to(torch::kFloat).sum());
}

bool Loss::has(Term t) const {
  return std::any_of(terms_.begin(), terms_.end(), [&](const auto& term) { return term.first == t; });
}

std::vector<torch::Tensor> Loss::fused_terms(const torch::Tensor& output, const torch::Tensor& labels) const {
  // ce or bce and dice, once each: the fused kernels' sums hold both. Neither reads rank_sum here.
  const Term cross = options_.sigmoid ? Term::kBce : Term::kCe;
  if (!kernels::enabled(kernels::Family::kLoss) || terms_.size() != 2 || !has(cross) || !has(Term::kDice)) return {};
  const Head head = options_.sigmoid ? Head::kSigmoid : Head::kSoftmax;
  if (!options_.class_weights.empty() || !kernels::loss_applies(output, labels, head)) return {};
  const kernels::RegionSums s =
      options_.sigmoid ? kernels::sigmoid_bce_dice_sums(output, labels) : kernels::softmax_ce_dice_sums(output, labels);
  // cross_entropy_loss: the mean over the voxels; sigmoid_bce_loss: over the channels and voxels.
  const int64_t count = options_.sigmoid ? output.numel() : output.numel() / output.size(1);
  const torch::Tensor ce = s.ce / static_cast<double>(count);
  const torch::Tensor dice = dice_loss_from_sums(s.inter, s.psum + s.ysum, kDiceSmooth, options_.sigmoid ? 0 : 1);
  std::vector<torch::Tensor> out;
  for (const auto& [t, w] : terms_) out.push_back(t == Term::kDice ? dice : ce);
  return out;
}

bool Loss::uses_skeleton() const { return has(Term::kSkeletonRecall); }
bool Loss::uses_distance() const { return has(Term::kBoundary); }

LossParts Loss::parts(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                      const TruthMaps& maps) const {
  torch::Tensor labels = target, valid;
  if (options_.ignore_label >= 0 && target.scalar_type() == torch::kLong) {
    valid = target != options_.ignore_label;           // (N, D, H, W) bool
    labels = target.masked_fill(~valid, /*value=*/0);  // a class every term can one-hot; left out by `valid`
  }
  LossParts p;
  std::vector<torch::Tensor> values;
  const std::vector<torch::Tensor> fused = valid.defined() ? std::vector<torch::Tensor>{} : fused_terms(output, labels);
  for (size_t i = 0; i < terms_.size(); ++i) {
    const auto& [t, w] = terms_[i];
    torch::Tensor v = fused.empty() ? term(t, output, labels, mask, valid, maps) : fused[i];
    if (!logged_.empty()) values.push_back(v.detach());
    const torch::Tensor weighted = w == 1.0 ? v : v * w;
    p.total = p.total.defined() ? p.total + weighted : weighted;
  }
  if (!values.empty()) p.terms = torch::stack(values).to(torch::kFloat);
  return p;
}

torch::Tensor Loss::operator()(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                               const TruthMaps& maps) const {
  return parts(output, target, mask, maps).total;
}

TruthMapOptions truth_map_options(const Config& cfg, const DatasetInfo& info) {
  TruthMapOptions o;
  // Only the list form has these terms; Loss knows which of its terms read which map.
  const LossSpec& spec = cfg.training.loss;
  if (info.task != Task::kSegmentation || !cfg.training.cache_truth_maps || !spec.is_list()) return o;
  const Loss loss(spec);
  o.skeleton = loss.uses_skeleton();
  o.distance = loss.uses_distance();
  o.num_classes = info.num_classes;
  o.skeleton_iterations = cfg.training.skeleton_iterations;
  return o;
}

TruthMaps downsample_maps(const TruthMaps& maps, const std::array<int64_t, 3>& factor) {
  if (factor == std::array<int64_t, 3>{1, 1, 1}) return maps;
  TruthMaps out;
  if (maps.skeleton.defined()) {
    namespace F = torch::nn::functional;
    const torch::Tensor s = maps.skeleton.unsqueeze(1).to(torch::kFloat);  // (N, 1, d, h, w)
    const std::vector<int64_t> kernel(factor.begin(), factor.end());
    out.skeleton = F::max_pool3d(s, F::MaxPool3dFuncOptions(kernel).stride(kernel)).squeeze(1).to(torch::kUInt8);
  }
  if (maps.distance.defined()) {
    const double scale = std::cbrt(static_cast<double>(factor[0] * factor[1] * factor[2]));
    out.distance = downsample_labels(maps.distance, factor) / scale;
  }
  return out;
}

}  // namespace u3d
