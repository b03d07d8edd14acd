#include "u3d/train/topology_losses.h"

#include <algorithm>
#include <limits>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

// Masking: the prediction is zeroed at invalid voxels before anything reads it (pm below) and the
// labels there are read as background, so every foreground term (skeletons, products with g or s)
// is already 0 there; multiplying those by v again would change nothing.

// Maximum (or minimum) of each voxel and its two neighbours along `dim`, the border padded with -inf
// (+inf): max_pool3d with kernel 3 along that axis, stride 1, padding 1, without its int64 indices.
torch::Tensor extreme3(const torch::Tensor& x, int64_t dim, bool take_max) {
  std::vector<int64_t> pad(static_cast<size_t>(2 * (x.dim() - dim)), 0);
  pad[pad.size() - 2] = 1;
  pad[pad.size() - 1] = 1;
  const double inf = std::numeric_limits<double>::infinity();
  const torch::Tensor padded = torch::constant_pad_nd(x, pad, take_max ? -inf : inf);
  const int64_t n = x.size(dim);
  const torch::Tensor a = padded.narrow(dim, 0, n), b = padded.narrow(dim, 1, n), c = padded.narrow(dim, 2, n);
  return take_max ? torch::maximum(torch::maximum(a, b), c) : torch::minimum(torch::minimum(a, b), c);
}

torch::Tensor erode(const torch::Tensor& x) {
  return torch::minimum(torch::minimum(extreme3(x, 2, /*take_max=*/false), extreme3(x, 3, /*take_max=*/false)),
                        extreme3(x, 4, /*take_max=*/false));
}

torch::Tensor dilate(const torch::Tensor& x) {
  return extreme3(extreme3(extreme3(x, 4, /*take_max=*/true), 3, /*take_max=*/true), 2, /*take_max=*/true);
}

torch::Tensor opening(const torch::Tensor& x) { return dilate(erode(x)); }

void check_volume(const torch::Tensor& x, const char* what) {
  if (x.dim() != 5) {
    throw ConfigError(fmt::format("{}: expected a (N, C, D, H, W) tensor, got {} dimensions", what, x.dim()));
  }
}

torch::Tensor skeleton(torch::Tensor x, int64_t iterations) {
  check_volume(x, "soft_skeleton");
  if (iterations < 0) throw ConfigError(fmt::format("soft_skeleton: iterations {} must be >= 0", iterations));
  torch::Tensor skel = torch::relu(x - opening(x));
  for (int64_t i = 0; i < iterations; ++i) {
    x = erode(x);
    const torch::Tensor delta = torch::relu(x - opening(x));
    skel = skel + torch::relu(delta - skel * delta);
  }
  return skel;
}

// (N, 1, D, H, W) bool, or undefined.
torch::Tensor valid_5d(const torch::Tensor& valid) {
  return valid.defined() ? valid.to(torch::kBool).unsqueeze(1) : torch::Tensor();
}

// Labels with the invalid voxels set to background.
torch::Tensor clean_labels(const torch::Tensor& labels, const torch::Tensor& valid) {
  return valid.defined() ? labels.masked_fill(valid.to(torch::kBool).logical_not(), 0) : labels;
}

torch::Tensor zero_invalid(const torch::Tensor& x, const torch::Tensor& v5) {
  return v5.defined() ? torch::where(v5, x, 0.0) : x;
}

// softmax(logits) of the foreground classes, float32, zeroed at invalid voxels: (N, K-1, D, H, W).
torch::Tensor foreground_probs(const torch::Tensor& logits, const torch::Tensor& v5) {
  check_volume(logits, "topology loss logits");
  if (logits.size(1) < 2) {
    throw ConfigError(fmt::format("topology loss: {} output channel(s), expected >= 2 classes", logits.size(1)));
  }
  const torch::Tensor p = torch::softmax(logits.to(torch::kFloat), /*dim=*/1).slice(/*dim=*/1, /*start=*/1);
  return zero_invalid(p, v5);
}

// `sum` (a batch sum), over every rank when `over_ranks` is given.
torch::Tensor gathered(const torch::Tensor& sum, const BatchSum& over_ranks) {
  return over_ranks ? over_ranks(sum) : sum;
}

// Sum over the batch (of every rank) and the volume of (N, C, D, H, W): (C).
torch::Tensor sum_per_class(const torch::Tensor& x, const BatchSum& over_ranks) {
  return gathered(x.sum({0, 2, 3, 4}), over_ranks);
}

}  // namespace

torch::Tensor one_hot_labels(const torch::Tensor& labels, int64_t k, torch::ScalarType dtype, at::MemoryFormat format) {
  std::vector<int64_t> size = labels.sizes().vec();
  size.insert(size.begin() + 1, k);
  const torch::Tensor out = torch::empty(size, labels.options().dtype(dtype).memory_format(format)).zero_();
  return out.scatter_(/*dim=*/1, labels.unsqueeze(1).to(torch::kLong), /*value=*/1);
}

torch::Tensor soft_erode(const torch::Tensor& x) { return erode(x); }
torch::Tensor soft_dilate(const torch::Tensor& x) { return dilate(x); }
torch::Tensor soft_open(const torch::Tensor& x) { return opening(x); }
torch::Tensor soft_skeleton(const torch::Tensor& x, int64_t iterations) { return skeleton(x, iterations); }

torch::Tensor cldice_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                          int64_t iterations, double smooth, const BatchSum& over_ranks) {
  const torch::Tensor v5 = valid_5d(valid);
  const torch::Tensor p = foreground_probs(logits, v5);  // (N, K-1, ...), 0 where invalid
  const torch::Tensor g = one_hot_labels(clean_labels(labels, valid), logits.size(1)).slice(1, 1);
  const torch::Tensor skel_p = u3d::soft_skeleton(p, iterations);
  torch::Tensor skel_g;
  {
    torch::NoGradGuard no_grad;
    skel_g = u3d::soft_skeleton(g, iterations);
  }
  const torch::Tensor tprec =
      (sum_per_class(skel_p * g, over_ranks) + smooth) / (sum_per_class(skel_p, over_ranks) + smooth);
  const torch::Tensor tsens =
      (sum_per_class(skel_g * p, over_ranks) + smooth) / (sum_per_class(skel_g, over_ranks) + smooth);
  const torch::Tensor cl = 2.0 * tprec * tsens / (tprec + tsens);
  return 1.0 - cl.mean();
}

torch::Tensor skeleton_of_labels(const torch::Tensor& labels, int64_t num_classes, int64_t iterations) {
  torch::NoGradGuard no_grad;
  return u3d::soft_skeleton(one_hot_labels(labels, num_classes), iterations);
}

torch::Tensor skeleton_recall_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                                   int64_t iterations, double smooth, const BatchSum& over_ranks) {
  torch::Tensor s;
  {
    torch::NoGradGuard no_grad;  // the background's skeleton is not needed: foreground channels only
    s = u3d::soft_skeleton(one_hot_labels(clean_labels(labels, valid), logits.size(1)).slice(1, 1), iterations);
  }
  return u3d::skeleton_recall_given(logits, s, valid, smooth, over_ranks);
}

torch::Tensor skeleton_recall_given(const torch::Tensor& logits, const torch::Tensor& skeleton,
                                    const torch::Tensor& valid, double smooth, const BatchSum& over_ranks) {
  const torch::Tensor v5 = valid_5d(valid);
  const torch::Tensor p = foreground_probs(logits, v5);
  const torch::Tensor s = zero_invalid(skeleton.detach().to(torch::kFloat), v5);
  const torch::Tensor recall = (sum_per_class(p * s, over_ranks) + smooth) / (sum_per_class(s, over_ranks) + smooth);
  return 1.0 - recall.mean();
}

torch::Tensor truncated_distance(const torch::Tensor& mask, int64_t max_distance) {
  check_volume(mask, "truncated_distance");
  if (max_distance < 1)
    throw ConfigError(fmt::format("truncated_distance: max_distance {} must be >= 1", max_distance));
  torch::NoGradGuard no_grad;
  const torch::Tensor m = mask.detach().gt(0.5).to(torch::kFloat);
  // 1 + the number of steps k = 1 .. max_distance-1 after which dilate^k(seed) has not reached a voxel.
  // After (largest edge - 1) steps every voxel a seed can reach is reached, so the steps beyond it
  // add the same (1 - reached) each: counted at once, the time does not grow with max_distance.
  const auto sizes = mask.sizes();
  const int64_t edge = *std::max_element(sizes.end() - 3, sizes.end());
  const int64_t dilations = std::min(max_distance - 1, edge);
  const auto steps_to_reach = [&](const torch::Tensor& seed) {
    torch::Tensor reached = seed;
    torch::Tensor d = torch::ones_like(seed);
    for (int64_t k = 1; k <= dilations; ++k) {
      reached = dilate(reached);
      d = d + (1.0 - reached);
    }
    const auto rest = static_cast<double>(max_distance - 1 - dilations);
    return rest > 0 ? d + rest * (1.0 - reached) : d;
  };
  const torch::Tensor outside = 1.0 - m;
  return steps_to_reach(m) * outside - steps_to_reach(outside) * m;
}

torch::Tensor boundary_loss(const torch::Tensor& logits, const torch::Tensor& labels, const torch::Tensor& valid,
                            int64_t max_distance, const BatchSum& over_ranks) {
  const torch::Tensor g = one_hot_labels(clean_labels(labels, valid), logits.size(1)).slice(1, 1);
  const torch::Tensor sdf = u3d::truncated_distance(g, max_distance) / static_cast<double>(max_distance);
  return u3d::boundary_loss_given(logits, sdf, valid, over_ranks);
}

torch::Tensor boundary_loss_given(const torch::Tensor& logits, const torch::Tensor& sdf, const torch::Tensor& valid,
                                  const BatchSum& over_ranks) {
  const torch::Tensor v5 = valid_5d(valid);
  const torch::Tensor p = foreground_probs(logits, v5);
  const int64_t voxels = p.size(0) * p.size(2) * p.size(3) * p.size(4);
  const torch::Tensor count = gathered(valid.defined() ? valid.to(torch::kFloat).sum()
                                                       : torch::full({}, static_cast<double>(voxels), p.options()),
                                       over_ranks)
                                  .clamp_min(1.0);
  return (sum_per_class(p * sdf.detach().to(torch::kFloat), over_ranks) / count).mean();
}

torch::Tensor weighted_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                     const torch::Tensor& valid, const std::vector<double>& class_weights,
                                     const BatchSum& over_ranks) {
  const int64_t k = logits.size(1);
  if (!class_weights.empty() && static_cast<int64_t>(class_weights.size()) != k) {
    throw ConfigError(fmt::format("weighted_cross_entropy: {} class weights for {} classes (expected {} or none)",
                                  class_weights.size(), k, k));
  }
  const torch::Tensor log_p = torch::log_softmax(logits.to(torch::kFloat), /*dim=*/1);  // (N, K, ...)
  torch::Tensor w_onehot = one_hot_labels(clean_labels(labels, valid), k);              // w[y] at channel y
  if (!class_weights.empty()) {
    // Filled on the device (no host-to-device copy, which a CUDA graph capture would refuse).
    const torch::Tensor w = torch::empty({k}, log_p.options());
    for (int64_t c = 0; c < k; ++c) w.select(0, c).fill_(class_weights[static_cast<size_t>(c)]);
    std::vector<int64_t> shape(static_cast<size_t>(logits.dim()), 1);
    shape[1] = k;
    w_onehot = w_onehot * w.view(shape);
  }
  torch::Tensor nll = -(log_p * w_onehot).sum(/*dim=*/1);  // (N, D, H, W)
  torch::Tensor weight = w_onehot.sum(/*dim=*/1);
  if (valid.defined()) {
    const torch::Tensor vb = valid.to(torch::kBool);
    nll = torch::where(vb, nll, 0.0);
    weight = torch::where(vb, weight, 0.0);
  }
  return gathered(nll.sum(), over_ranks) /
         gathered(weight.sum(), over_ranks).clamp_min(std::numeric_limits<float>::min());
}

torch::Tensor masked_soft_dice_loss(const torch::Tensor& logits, const torch::Tensor& labels,
                                    const torch::Tensor& valid, double smooth) {
  const int64_t k = logits.size(1);
  const torch::Tensor v5 = valid_5d(valid);
  const torch::Tensor probs = zero_invalid(torch::softmax(logits.to(torch::kFloat), /*dim=*/1), v5);  // (N, K, ...)
  const torch::Tensor onehot = zero_invalid(one_hot_labels(clean_labels(labels, valid), k), v5);
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < logits.dim(); ++d) spatial.push_back(d);
  const torch::Tensor inter = (probs * onehot).sum(spatial);             // (N, K)
  const torch::Tensor denom = probs.sum(spatial) + onehot.sum(spatial);  // (N, K)
  const torch::Tensor dice = (2.0 * inter + smooth) / (denom + smooth);
  return 1.0 - dice.slice(/*dim=*/1, /*start=*/1).mean();
}

}  // namespace u3d
