// Training losses. Shapes: output (N, K, D, H, W); regression target (N, 1, D, H, W) float;
// segmentation target (N, D, H, W) int64 labels; mask (N, 1, D, H, W) float {0, 1} or undefined.
// Call these qualified (u3d::l1_loss): unqualified calls also find ATen's namesakes by ADL.
#pragma once
#include <torch/torch.h>

#include <array>
#include <functional>
#include <memory>
#include <string>

#include "u3d/core/config.h"
#include "u3d/data/batch.h"
#include "u3d/data/truth_maps.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/train/topology_losses.h"

namespace u3d {

torch::Tensor l1_loss(const torch::Tensor& pred, const torch::Tensor& target);
// Mean |pred - target| over the voxels where mask = 1 (0 when the mask is empty). `count`: the
// voxel count to divide by (data-parallel: the ranks' mean mask count, so the ranks' mean loss is
// the global batch's); undefined: this batch's mask sum.
torch::Tensor masked_l1_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask,
                             const torch::Tensor& count = {});
torch::Tensor mse_loss(const torch::Tensor& pred, const torch::Tensor& target);
torch::Tensor masked_mse_loss(const torch::Tensor& pred, const torch::Tensor& target, const torch::Tensor& mask,
                              const torch::Tensor& count = {});
// The smoothing term of the soft Dice losses (soft_dice_loss, sigmoid_dice_loss, the fused path).
constexpr double kDiceSmooth = 1e-5;
// 1 - mean soft Dice of the foreground classes (1..K-1), per sample then averaged:
// dice_k = (2 sum(p_k y_k) + smooth) / (sum(p_k) + sum(y_k) + smooth), p = softmax(logits).
torch::Tensor soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels, double smooth = kDiceSmooth);
// 1 - mean over (N, C) of (2 inter + smooth) / (denom + smooth), classes from `first` on: the Dice
// losses' last step, from (N, C) float32 sums of p y (inter) and of p plus y (denom).
torch::Tensor dice_loss_from_sums(const torch::Tensor& inter, const torch::Tensor& denom, double smooth, int64_t first);
// Mean cross-entropy of logits (N, K, ...) against int64 labels (N, ...), in float32. On CUDA with
// deterministic algorithms on (training.deterministic), cross_entropy_loss_deterministic(): ATen's
// nll_loss2d, which F.cross_entropy uses for 5-D input, has no deterministic CUDA kernel.
torch::Tensor cross_entropy_loss(const torch::Tensor& logits, const torch::Tensor& labels);
// The same value as log_softmax and a one-hot product (element-wise backward, no atomics, no host
// read: one_hot with K classes does not check the labels on CUDA).
torch::Tensor cross_entropy_loss_deterministic(const torch::Tensor& logits, const torch::Tensor& labels);
// cross_entropy_loss + soft_dice_loss (nnU-Net's default).
torch::Tensor dice_ce_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// Sigmoid head (core/output_head.h): logits (N, K - 1, ...), channel k - 1 = label k; labels (N, ...)
// int64. The target of channel k - 1 is labels == k. `valid` (N, ...) bool: the voxels that count;
// undefined: all.
// Mean binary cross-entropy with logits over the channels and the valid voxels.
torch::Tensor sigmoid_bce_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                               const torch::Tensor& valid = {});
// 1 - mean soft Dice of the K - 1 channels, per sample then averaged, p = sigmoid(logits):
// dice_k = (2 sum(p_k y_k) + smooth) / (sum(p_k) + sum(y_k) + smooth), sums over the valid voxels.
torch::Tensor sigmoid_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                                const torch::Tensor& valid = {}, double smooth = kDiceSmooth);

// auto -> a concrete kind for the task; ConfigError for a kind that does not fit the task or data.
LossKind resolve_loss(LossKind kind, Task task, bool has_mask);
// The same for training.loss: a named loss as above; a list's terms must fit the task (segmentation:
// ce, dice, cldice, skeleton_recall, boundary, bce; regression: l1, mse, masked_l1, masked_mse, the
// masked ones with a loss mask). With a sigmoid head (model.head) auto is [bce, dice], and a
// regression dataset is a ConfigError (the loss's fit to the head: validate_head, core/output_head.h).
LossSpec resolve_loss(const LossSpec& spec, Task task, bool has_mask, Head head = Head::kSoftmax);

// What the terms need besides the outputs and targets (training.* and the dataset).
struct LossOptions {
  int64_t ignore_label = -1;          // segmentation voxels with this label count in no term; -1: none
  std::vector<double> class_weights;  // ce: per class (empty: all 1)
  int64_t skeleton_iterations = 3;    // cldice, skeleton_recall
  int64_t boundary_distance = 8;      // boundary
  bool sigmoid = false;               // model.head sigmoid: dice on sigmoid probabilities (K - 1 channels)
  // Data-parallel training: the mean over the ranks of a () float32 device count (an all-reduce);
  // the masked losses divide by it, as one process with the global batch divides by its mask sum.
  // Unset: one process. A collective: only for the training step, never validation.
  std::function<torch::Tensor(const torch::Tensor&)> rank_mean;
  // Data-parallel training: the differentiable sum over the ranks that clDice, skeleton recall, the
  // boundary term and class-weighted CE apply to their batch sums (topology_losses.h). Unset: one
  // process. A collective, forward and backward: only for the training step.
  BatchSum rank_sum;
};
LossOptions loss_options(const TrainingConfig& training, const DatasetInfo& info, Head head = Head::kSoftmax);

// A loss's value and, for the list form of training.loss, each term's unweighted value.
struct LossParts {
  torch::Tensor total;  // () float32
  torch::Tensor terms;  // (T,) float32, T = Loss::term_names().size(); undefined for a named loss
};

// Deep supervision (nnU-Net): weights of `outputs` outputs, full resolution first: 1, 1/2, 1/4, ...,
// the lowest-resolution output set to 0 when there are two or more, normalised to sum 1.
std::vector<double> deep_supervision_weights(int64_t outputs);
// Labels (N, D, H, W) down-sampled by an integer factor per spatial axis by nearest neighbour, as
// nnU-Net does (F.interpolate mode nearest-exact: output voxel o takes input voxel f * o + f / 2).
torch::Tensor downsample_labels(const torch::Tensor& labels, const std::array<int64_t, 3>& factor);
// The ground-truth maps of a batch (data/truth_maps.h) for an output down-sampled by `factor` per
// spatial axis (deep supervision): the skeleton by max pooling over each factor block (a thin
// skeleton survives; where two classes' skeletons share a block the higher class wins), the
// distance by nearest neighbour as downsample_labels and divided by the geometric mean of the
// factors (voxels of the output).
TruthMaps downsample_maps(const TruthMaps& maps, const std::array<int64_t, 3>& factor);

class Loss;
// sum_i weights[i] * loss(outputs[i], labels down-sampled to outputs[i]); outputs (N, K, ...) finest
// first; zero weights are skipped. deep_supervision_parts also weights the terms the same way, and
// down-samples the ground-truth maps with the labels (truth_maps.h, downsample_maps).
torch::Tensor deep_supervision_loss(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                    const torch::Tensor& labels, const std::vector<double>& weights);
LossParts deep_supervision_parts(const Loss& loss, const std::vector<torch::Tensor>& outputs,
                                 const torch::Tensor& labels, const std::vector<double>& weights,
                                 const TruthMaps& maps = {});

// The training loss: a resolved named loss (l1, ..., dice_ce: unchanged values) or the weighted sum
// of a list's terms (train/topology_losses.h for cldice, skeleton_recall, boundary). With the fused
// kernels enabled (kernels::enabled(), model.fused_kernels) a loss of exactly ce and dice (dice_ce, or
// a list of the two with any weights) on a softmax head, or bce and dice on a sigmoid head, without
// an ignore label or class weights, takes both terms from one fused pass when kernels::loss_applies()
// (kernels/fused_loss.h): the same values within float32 rounding. Otherwise ATen. With an ignore
// label, segmentation terms leave those voxels out (valid = labels != ignore_label). With ground-truth
// maps (Batch::maps, made once per case in the cache), skeleton_recall reads the cached skeleton and
// boundary the cached Euclidean distance (/ boundary_distance, clamped to [-1, 1]); without them both
// make theirs from the labels (soft skeleton; truncated chessboard distance).
class Loss {
 public:
  explicit Loss(LossKind kind, LossOptions options = {});
  // `spec` resolved (resolve_loss): no auto.
  explicit Loss(const LossSpec& spec, LossOptions options = {});
  torch::Tensor operator()(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                           const TruthMaps& maps = {}) const;
  LossParts parts(const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                  const TruthMaps& maps = {}) const;
  // Whether a term reads a ground-truth map: what the cache must make (truth_maps.h).
  bool uses_skeleton() const;
  bool uses_distance() const;
  LossKind kind() const { return kind_; }  // kAuto for the list form
  // The list form's term names, in order ("ce", "cldice"); empty for a named loss.
  const std::vector<std::string>& term_names() const { return logged_; }
  const LossOptions& options() const { return options_; }

 private:
  enum class Term { kCe, kDice, kClDice, kSkeletonRecall, kBoundary, kBce, kL1, kMaskedL1, kMse, kMaskedMse };
  torch::Tensor term(Term t, const torch::Tensor& output, const torch::Tensor& target, const torch::Tensor& mask,
                     const torch::Tensor& valid, const TruthMaps& maps) const;
  bool has(Term t) const;
  // The terms' values from the fused kernels, in terms_' order; empty when they do not apply.
  std::vector<torch::Tensor> fused_terms(const torch::Tensor& output, const torch::Tensor& labels) const;
  // Data-parallel: the ranks' mean mask count (LossOptions::rank_mean); undefined for one process.
  torch::Tensor rank_mean_count(const torch::Tensor& mask) const;
  LossKind kind_ = LossKind::kAuto;
  LossOptions options_;
  std::vector<std::pair<Term, double>> terms_;
  std::vector<std::string> logged_;
};

// What a run's cache makes (data/truth_maps.h): a segmentation dataset, training.cache_truth_maps on
// and a skeleton_recall or boundary term in training.loss; else nothing.
TruthMapOptions truth_map_options(const Config& cfg, const DatasetInfo& info);

}  // namespace u3d
