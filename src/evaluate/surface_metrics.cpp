// Surface Dice, variation of information and the combined score (definitions in
// include/u3d/evaluate/surface_metrics.h); topology.cpp holds components and Betti numbers.
#include "u3d/evaluate/surface_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "surface_metrics_detail.h"
#include "u3d/core/errors.h"
#include "u3d/core/text.h"
#include "u3d/evaluate/segmentation_eval.h"

namespace u3d {

namespace surface_metrics_detail {

torch::Tensor binary_mask(const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.dim() != 3) {
    throw DataError(fmt::format("{}: expected a (D, H, W) tensor, got shape {}", what,
                                t.defined() ? fmt::format("{}", fmt::join(t.sizes(), "x")) : "undefined"));
  }
  return t.to(torch::kCPU).ne(0).to(torch::kUInt8).contiguous();
}

}  // namespace surface_metrics_detail

namespace {

using surface_metrics_detail::binary_mask;

void check_same_shape(const torch::Tensor& pred, const torch::Tensor& ref, const char* what) {
  if (pred.sizes() != ref.sizes()) {
    throw DataError(fmt::format("{}: prediction shape {} differs from reference shape {}", what,
                                shape_text(pred.sizes(), ShapeStyle::kCross),
                                shape_text(ref.sizes(), ShapeStyle::kCross)));
  }
}

// Bounds [lo, hi) per axis of the nonzero voxels of m; false when m is empty.
bool foreground_box(const torch::Tensor& m, std::array<int64_t, 3>& lo, std::array<int64_t, 3>& hi) {
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> others;
    for (int64_t a = 0; a < 3; ++a) {
      if (a != axis) others.push_back(a);
    }
    const auto any = m.amax(others).nonzero();
    if (any.numel() == 0) return false;
    lo[axis] = any.min().item<int64_t>();
    hi[axis] = any.max().item<int64_t>() + 1;
  }
  return true;
}

// Number of nonzero voxels of `from` within `tolerance` voxels of `to`'s nonzero voxels (the exact
// distance transform of segmentation_eval.h, unit spacing).
int64_t count_within(const torch::Tensor& from, const torch::Tensor& to, double tolerance) {
  const auto d = distance_transform(to, {1.0, 1.0, 1.0});
  return d.le(tolerance).logical_and(from.to(torch::kBool)).sum().item<int64_t>();
}

}  // namespace

double surface_dice(const torch::Tensor& pred, const torch::Tensor& ref, double tolerance_voxels) {
  const auto p = binary_mask(pred, "surface_dice prediction");
  const auto r = binary_mask(ref, "surface_dice reference");
  check_same_shape(p, r, "surface_dice");
  if (!(tolerance_voxels >= 0.0)) {
    throw DataError(fmt::format("surface_dice: tolerance {} voxels, expected >= 0", tolerance_voxels));
  }
  auto sp = surface_voxels(p.to(torch::kBool)).to(torch::kUInt8);
  auto sr = surface_voxels(r.to(torch::kBool)).to(torch::kUInt8);
  const int64_t np = sp.sum().item<int64_t>(), nr = sr.sum().item<int64_t>();
  if (np == 0 && nr == 0) return 1.0;
  if (np == 0 || nr == 0) return 0.0;
  // Both surfaces lie in their joint bounding box, and so does every nearest point: crop to it.
  std::array<int64_t, 3> lo{}, hi{};
  foreground_box(sp | sr, lo, hi);
  auto crop = [&](const torch::Tensor& t) {
    return t.slice(0, lo[0], hi[0]).slice(1, lo[1], hi[1]).slice(2, lo[2], hi[2]).contiguous();
  };
  sp = crop(sp);
  sr = crop(sr);
  const int64_t hits = count_within(sp, sr, tolerance_voxels) + count_within(sr, sp, tolerance_voxels);
  return static_cast<double>(hits) / static_cast<double>(np + nr);
}

VoiTerms variation_of_information(const torch::Tensor& pred, const torch::Tensor& ref) {
  const auto p = binary_mask(pred, "variation_of_information prediction");
  const auto r = binary_mask(ref, "variation_of_information reference");
  check_same_shape(p, r, "variation_of_information");
  const auto lp = label_components(p, 26);
  const auto lr = label_components(r, 26);
  const int32_t* a = lr.labels.data_ptr<int32_t>();
  const int32_t* b = lp.labels.data_ptr<int32_t>();
  std::vector<int64_t> ref_sizes(static_cast<size_t>(lr.count) + 1, 0);
  std::vector<int64_t> pred_sizes(static_cast<size_t>(lp.count) + 1, 0);
  std::unordered_map<uint64_t, int64_t> table;
  int64_t total = 0;
  uint64_t last_key = ~uint64_t{0};
  int64_t* last_count = nullptr;
  const int64_t n = p.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] == 0 && b[i] == 0) continue;  // outside the union of the foregrounds
    const uint64_t key = (static_cast<uint64_t>(a[i]) << 32) | static_cast<uint32_t>(b[i]);
    if (key != last_key) {
      last_key = key;
      last_count = &table[key];
    }
    ++*last_count;
    ++ref_sizes[static_cast<size_t>(a[i])];
    ++pred_sizes[static_cast<size_t>(b[i])];
    ++total;
  }
  VoiTerms terms;
  if (total == 0) return terms;
  const double nt = static_cast<double>(total);
  for (const auto& [key, count] : table) {
    const double c = static_cast<double>(count);
    const auto ref_size = static_cast<double>(ref_sizes[key >> 32]);
    const auto pred_size = static_cast<double>(pred_sizes[key & 0xffffffffu]);
    terms.split -= c / nt * std::log2(c / ref_size);   // H(pred | ref)
    terms.merge -= c / nt * std::log2(c / pred_size);  // H(ref | pred)
  }
  // Exact zeros print as 0, not -0.
  terms.split = std::max(0.0, terms.split);
  terms.merge = std::max(0.0, terms.merge);
  return terms;
}

double voi_score(double voi, double alpha) { return 1.0 / (1.0 + alpha * voi); }

SurfaceScores score_surface(const torch::Tensor& pred, const torch::Tensor& ref, double tolerance,
                            std::optional<int64_t> ignore_label) {
  if (!pred.defined() || !ref.defined() || pred.dim() != 3 || ref.dim() != 3 || pred.sizes() != ref.sizes()) {
    throw DataError(fmt::format("score_surface: prediction shape {} and reference shape {} must be the same (D, H, W)",
                                pred.defined() ? shape_text(pred.sizes(), ShapeStyle::kCross) : "undefined",
                                ref.defined() ? shape_text(ref.sizes(), ShapeStyle::kCross) : "undefined"));
  }
  auto p = pred.to(torch::kCPU);
  auto r = ref.to(torch::kCPU);
  const auto bad_pred = p.ne(0).logical_and(p.ne(1));
  if (bad_pred.any().item<bool>()) {
    throw DataError(fmt::format("score_surface: prediction holds the value {}, expected 0 or 1",
                                p.masked_select(bad_pred)[0].item<double>()));
  }
  auto bad_ref = r.ne(0).logical_and(r.ne(1));
  torch::Tensor ignored;
  if (ignore_label) {
    ignored = label_equals(r, *ignore_label);  // never r.eq: a uint8 reference would compare against 258 as 2
    bad_ref = bad_ref.logical_and(ignored.logical_not());
  }
  if (bad_ref.any().item<bool>()) {
    throw DataError(fmt::format("score_surface: reference holds the value {}, expected 0, 1{}",
                                r.masked_select(bad_ref)[0].item<double>(),
                                ignore_label ? fmt::format(" or the ignore label {}", *ignore_label) : ""));
  }
  auto pm = binary_mask(p, "score_surface prediction");
  auto rm = binary_mask(r, "score_surface reference");
  if (ignored.defined()) {
    pm.masked_fill_(ignored, 0);
    rm.masked_fill_(ignored, 0);
  }
  SurfaceScores s;
  s.surface_dice = surface_dice(pm, rm, tolerance);
  const auto voi = variation_of_information(pm, rm);
  s.voi_split = voi.split;
  s.voi_merge = voi.merge;
  s.voi = voi.total();
  s.voi_score = voi_score(s.voi);
  s.betti_pred = betti_numbers(pm, DigitalTopology::kFg6);
  s.betti_ref = betti_numbers(rm, DigitalTopology::kFg6);
  s.topo_score = topo_score(topology_counts(pm, rm, /*tiles_per_axis=*/2));
  s.total = 0.30 * s.topo_score + 0.35 * s.surface_dice + 0.35 * s.voi_score;
  return s;
}

}  // namespace u3d
