// Topology-aware segmentation losses (clDice, Skeleton Recall, boundary loss) and masked versions of
// the region losses, as pure tensor functions: the same code on CPU and CUDA, static shapes, no host
// read (no .item(), no nonzero), so they run inside CUDA-graph-captured training steps.
//
// Shapes: logits (N, K, D, H, W), any floating dtype (bf16 under autocast), computed in float32;
// labels (N, D, H, W) int64, classes 0..K-1, 0 the background; valid (N, D, H, W) bool or an
// undefined tensor (every voxel valid). Where valid is false (the dataset's ignore label) the label
// may hold any value >= K: it is read as background, and the voxel is left out of every sum, both
// numerator and denominator; the logits there change nothing (the prediction there is read as 0 by
// the morphological operations). Losses are averaged over the foreground classes 1..K-1 and are
// differentiable with respect to the logits.
// Call these qualified (u3d::soft_skeleton): unqualified calls also find ATen's namesakes by ADL.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace u3d {

// Data-parallel training: the sum of a batch sum over every rank, differentiable
// (Distributed::sum_with_grad), so that the losses below, which divide sums over the whole batch,
// take the global batch's value and gradient. Empty: one process, this batch's sums.
using BatchSum = std::function<torch::Tensor(const torch::Tensor&)>;
constexpr double kSkeletonSmooth = 1.0;  // cldice_loss, skeleton_recall_loss

// (N, D, H, W) integer labels in [0, K) -> (N, K, D, H, W) {0, 1} in `dtype`, scattered straight
// into a zeroed tensor of `format` (pass the logits' suggest_memory_format(), so element-wise
// products with them run in one layout): no int64 one-hot (8 bytes per voxel and class) moved and
// copied to float. Labels outside [0, K) are an error (an index check; on CUDA a device assert).
torch::Tensor one_hot_labels(const torch::Tensor& labels, int64_t k, torch::ScalarType dtype = torch::kFloat,
                             at::MemoryFormat format = at::MemoryFormat::Contiguous);

// Soft morphology of clDice (Shit et al., CVPR 2021, reference soft_skeleton.py), on x (N, C, D, H, W)
// float in [0, 1], same shape out. Pooling pads with -inf: the volume's border is neither foreground
// nor background. soft_erode: minimum over the 6-neighbourhood (three separable min-pools, kernels
// 3x1x1, 1x3x1, 1x1x3); soft_dilate: maximum over the 3x3x3 neighbourhood; soft_open: dilate(erode(x)).
torch::Tensor soft_erode(const torch::Tensor& x);
torch::Tensor soft_dilate(const torch::Tensor& x);
torch::Tensor soft_open(const torch::Tensor& x);
// skel = relu(x - open(x)); `iterations` times: x = erode(x), delta = relu(x - open(x)),
// skel += relu(delta - skel * delta). Binary in, binary out. The skeleton of objects thicker than
// about 2 * iterations + 1 voxels is incomplete (their centre is never reached).
// These four take the minimum or maximum of shifted slices (torch::minimum / torch::maximum over a
// padded copy), never max_pool3d: the same values, but no int64 indices kept for the backward pass
// (8 bytes per voxel and class and pooling, in every iteration) and an element-wise backward that is
// deterministic on CUDA (max_pool3d's has no deterministic kernel). Where neighbours tie they share
// the gradient instead of max_pool3d's one winner.
torch::Tensor soft_skeleton(const torch::Tensor& x, int64_t iterations);

// 1 - mean over foreground classes of clDice_k = 2 tprec tsens / (tprec + tsens), with
// p = softmax(logits) * valid, g = one_hot(labels), sums over the whole batch and volume:
// tprec = (sum(skel(p_k) g_k v) + smooth) / (sum(skel(p_k) v) + smooth),
// tsens = (sum(skel(g_k) p_k v) + smooth) / (sum(skel(g_k) v) + smooth). Scalar float32.
torch::Tensor cldice_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                          int64_t iterations = 3, double smooth = kSkeletonSmooth, const BatchSum& over_ranks = {});

// (N, K, D, H, W) float {0, 1}: soft_skeleton of each class's binary mask of labels (classes 0..K-1,
// K = num_classes; a label outside 0..K-1 is an error on the CPU). No gradient.
torch::Tensor skeleton_of_labels(const torch::Tensor& labels, int64_t num_classes, int64_t iterations);
// Skeleton Recall loss (Kirchhoff et al., ECCV 2024): s_k = skeleton of the ground truth's class k
// (invalid voxels read as background), p = softmax(logits), sums over the batch and volume:
// 1 - mean_k (sum(p_k s_k v) + smooth) / (sum(s_k v) + smooth). Scalar float32.
torch::Tensor skeleton_recall_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                                   int64_t iterations = 3, double smooth = kSkeletonSmooth,
                                   const BatchSum& over_ranks = {});
// The same with the ground-truth skeleton given: skeleton (N, K-1, D, H, W) float {0, 1} of the
// foreground classes (e.g. the cache's, data/truth_maps.h), read as 0 where invalid.
torch::Tensor skeleton_recall_given(const torch::Tensor& logits, const torch::Tensor& skeleton,
                                    const torch::Tensor& valid, double smooth = kSkeletonSmooth,
                                    const BatchSum& over_ranks = {});

// Signed chessboard distance of mask (N, C, D, H, W) float {0, 1} (C = 1 or K), by iterated 3x3x3 max
// pooling, in voxels, float32, no gradient: sdf = d_out - d_in, where outside the mask
// d_out = min k >= 1 with dilate^k(mask) = 1, inside d_in = min k >= 1 with dilate^k(1 - mask) = 1;
// both capped at max_distance (>= 1). So -1 on the mask's boundary voxels, +1 next to them outside,
// never 0; an empty mask gives +max_distance everywhere, a full one -max_distance.
torch::Tensor truncated_distance(const torch::Tensor& mask, int64_t max_distance);
// Boundary loss (Kervadec et al., MIDL 2019): mean over foreground classes of
// sum(p_k sdf_k v) / sum(v) (0 when no voxel is valid), sums over the batch and volume, with
// sdf_k = truncated_distance(g_k, max_distance) / max_distance in [-1, 1] (invalid voxels read as
// background). Minimal (negative) when p_k = 1 exactly inside the ground truth.
torch::Tensor boundary_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                            int64_t max_distance = 8, const BatchSum& over_ranks = {});
// The same with the distance term given: sdf (N, K-1, D, H, W) float, the foreground classes'
// signed distances already scaled (boundary_loss: truncated_distance / max_distance; the cache's
// Euclidean maps: data/truth_maps.h), no gradient.
torch::Tensor boundary_loss_given(const torch::Tensor& logits, const torch::Tensor& sdf, const torch::Tensor& valid,
                                  const BatchSum& over_ranks = {});

// Weighted cross-entropy with PyTorch's weighted-mean semantics (weight= and ignore):
// -sum(w[y] log softmax(logits)[y] v) / sum(w[y] v), as log_softmax and a one-hot product
// (deterministic on CUDA, no nll_loss). class_weights: K values, or empty for all 1. 0 when no valid
// voxel carries weight (PyTorch gives NaN). Equals u3d::cross_entropy_loss with valid undefined and
// equal weights.
torch::Tensor weighted_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                     const torch::Tensor& valid, const std::vector<double>& class_weights,
                                     const BatchSum& over_ranks = {});
// u3d::soft_dice_loss (per sample, per foreground class, then the mean) with p and the one-hot labels
// multiplied by v before the sums; equals it with valid undefined.
torch::Tensor masked_soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                                    const torch::Tensor& valid, double smooth = 1e-5);

}  // namespace u3d
