#include "u3d/plan/planner.h"

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"
#include "u3d/plan/memory_model.h"
#include "u3d/plan/topology.h"

#include "plan_text.h"

namespace u3d {
namespace {

using plan_detail::flow_list;
using plan_detail::kGiB;
using plan_detail::voxels;

constexpr double kAssumedGiB = 80.0;
constexpr int64_t kMaxLevels = 8;          // model.levels' range (nnU-Net has no cap)
constexpr int64_t kMinBottleneck = 4;      // voxels per axis at the lowest resolution (nnU-Net's min edge)
constexpr double kBatchVoxelShare = 0.05;  // batch x patch voxels <= this share of the dataset's voxels
constexpr int64_t kActivationBytes = 2;    // bf16 autocast, training.precision auto on CUDA
constexpr int64_t kSegLossTensors = 6;     // dice_ce: float logits, softmax, log-softmax, one-hot, products

using Measure = std::function<int64_t(const ModelConfig&, int64_t in, int64_t out, const Shape3&, int64_t batch)>;

// Shapes of the cases resampled to `spacing`.
std::vector<Shape3> shapes_at(const DatasetFingerprint& fp, const std::array<double, 3>& spacing) {
  std::vector<Shape3> out;
  for (const auto& c : fp.cases) {
    Shape3 s{};
    for (int a = 0; a < 3; ++a) {
      s[a] = std::max<int64_t>(1, std::llround(static_cast<double>(c.shape[a]) * c.spacing[a] / spacing[a]));
    }
    out.push_back(s);
  }
  return out;
}

ModelConfig recipe_model(Task task, const Topology& t, int64_t max_filters) {
  ModelConfig m;
  m.architecture = Architecture::kUNet;
  m.levels = t.stages();
  m.strides = t.strides;
  m.kernel_sizes = t.kernels;
  m.base_filters = 32;
  m.max_filters = max_filters;
  m.convs_per_level = 2;
  m.kernel_size = 3;
  m.norm = Norm::kInstance;
  m.activation = Activation::kLeakyRelu;
  m.negative_slope = 0.01;
  m.deep_supervision = task == Task::kSegmentation;
  m.output_activation = task == Task::kSegmentation ? OutputActivation::kNone : OutputActivation::kRelu;
  return m;
}

// nnU-Net's topology for a patch; for a 2D plan (plan.slice_axis >= 0) the in-plane one: the slice
// axis (patch 1) is never pooled, its spacing never makes a kernel 3 there, and its kernels are 1.
Topology topology_for(const Plan& plan, const std::array<double, 3>& grid, const Shape3& p) {
  if (plan.slice_axis < 0) return pool_and_conv_props(grid, p, kMinBottleneck, kMaxLevels);
  std::array<double, 3> in_plane = grid;
  in_plane[plan.slice_axis] = 1e9;  // never within 2x of the finest in-plane spacing
  Topology t = pool_and_conv_props(in_plane, p, kMinBottleneck, kMaxLevels);
  for (auto& k : t.kernels) k[plan.slice_axis] = 1;
  return t;
}

// The plan at `spacing`: levels, patch, batch and their reasons. `stored`: plan for the cases'
// grids as stored in the file (what the trainer trains on: it does not resample), not resampled.
// plan.slice_axis >= 0: a 2D plan, patch 1 on that axis (nnU-Net's 2d configuration).
Plan plan_at(const DatasetFingerprint& fp, const std::array<double, 3>& spacing, Plan plan, const Measure& measure,
             bool stored) {
  std::vector<Shape3> shapes = shapes_at(fp, spacing);
  if (stored) {
    for (size_t i = 0; i < shapes.size(); ++i) shapes[i] = fp.cases[i].shape;
  }
  Shape3 smallest = shapes.front();
  int64_t total = 0;
  for (const auto& s : shapes) {
    for (int a = 0; a < 3; ++a) smallest[a] = std::min(smallest[a], s[a]);
    total += voxels(s);
  }
  for (int a = 0; a < 3; ++a) {
    std::vector<double> v;
    for (const auto& s : shapes) v.push_back(static_cast<double>(s[a]));
    plan.median_shape[a] = std::llround(percentile(v, 50.0));
  }
  plan.target_spacing = spacing;
  const double allowed = plan.margin * static_cast<double>(plan.budget_bytes);
  const int64_t states = plan.task == Task::kSegmentation ? 1 : 2;  // sgd momentum | adamw moments
  const int64_t loss = plan.task == Task::kSegmentation ? kSegLossTensors : 3;
  auto cost = [&](const Shape3& p, const Topology& t, int64_t batch) {
    const ModelConfig m = recipe_model(plan.task, t, plan.max_filters);
    if (measure) return measure(m, plan.in_channels, plan.out_channels, p, batch);
    return estimate_step_bytes(m, plan.in_channels, plan.out_channels, p, batch, kActivationBytes, states, loss);
  };
  // nnU-Net's topology (plan/topology.h) at the spacing of the grid trained on (as stored: the cases'
  // median spacing), found for the patch at most the median shape, which is then padded up to the
  // topology's divisor per axis as nnU-Net does: the patch may exceed the median and the smallest case
  // (the cache pads such cases, data/cache.h).
  const std::array<double, 3> grid = stored ? fp.median_spacing : spacing;
  auto round_patch = [&](const std::array<double, 3>& want, Topology* topology) {
    Shape3 p{};
    for (int a = 0; a < 3; ++a) {
      p[a] = std::max<int64_t>(1, std::min(static_cast<int64_t>(std::llround(want[a])), plan.median_shape[a]));
    }
    const Topology t = topology_for(plan, grid, p);
    for (int a = 0; a < 3; ++a) p[a] = (p[a] + t.divisor[a] - 1) / t.divisor[a] * t.divisor[a];
    *topology = t;
    return p;
  };
  // nnU-Net's start: a patch of 256^3 voxels' volume, isotropic in millimetres, at most the median shape.
  std::array<double, 3> want{};
  double inverse = 1;
  for (int a = 0; a < 3; ++a) inverse *= 1.0 / grid[a];
  for (int a = 0; a < 3; ++a) {
    want[a] = std::min(static_cast<double>(plan.median_shape[a]),
                       std::round(1.0 / grid[a] * std::cbrt(256.0 * 256.0 * 256.0 / inverse)));
  }
  if (plan.slice_axis >= 0) {
    for (int a = 0; a < 3; ++a) want[a] = static_cast<double>(plan.median_shape[a]);
    // nnU-Net's 2d: the in-plane patch starts at 2048^2 voxels in the spacings' aspect ratio, at most
    // the median in-plane shape; one voxel on the slice axis.
    double area = 1;
    for (int a = 0; a < 3; ++a) area *= a == plan.slice_axis ? 1.0 : 1.0 / grid[a];
    const double scale = std::sqrt(2048.0 * 2048.0 / area);
    for (int a = 0; a < 3; ++a) want[a] = a == plan.slice_axis ? 1.0 : std::min(want[a], scale / grid[a]);
  }
  bool shrunk = false;
  Topology topology;
  Shape3 p = round_patch(want, &topology);
  while (true) {
    const int64_t c = cost(p, topology, 2);
    if (c <= allowed) {
      plan.patch = p;
      plan.step_bytes = c;
      break;
    }
    // nnU-Net: shrink the axis largest relative to the median shape (ties: the last) by its divisor.
    int best = -1;
    for (int a = 0; a < 3; ++a) {
      if (p[a] <= 8) continue;
      const double ra = static_cast<double>(p[a]) / static_cast<double>(plan.median_shape[a]);
      if (best < 0 || ra >= static_cast<double>(p[best]) / static_cast<double>(plan.median_shape[best])) best = a;
    }
    if (best < 0) {
      throw ConfigError(fmt::format(
          "plan: not even a {} patch with batch 2 fits {:.1f} GiB x margin {} ({:.2f} GiB "
          "needed); give more memory with --gpu-memory",
          flow_list(p), static_cast<double>(plan.budget_bytes) / kGiB, plan.margin, static_cast<double>(c) / kGiB));
    }
    for (int a = 0; a < 3; ++a) want[a] = static_cast<double>(p[a]);
    want[best] = static_cast<double>(std::max<int64_t>(1, p[best] - topology.divisor[best]));
    for (int a = 0; a < 3; ++a) want[a] = std::min(want[a], static_cast<double>(plan.median_shape[a]));
    p = round_patch(want, &topology);
    shrunk = true;
  }
  plan.levels = topology.stages();
  plan.strides = topology.strides;
  plan.kernels = topology.kernels;
  // Batch: as many as fit, capped by the share of the dataset's voxels.
  const int64_t cap = std::max<int64_t>(  // rounded as nnU-Net rounds it
      2, std::llround(kBatchVoxelShare * static_cast<double>(total) / static_cast<double>(voxels(plan.patch))));
  // The cost grows with the batch: doubling steps, then bisection (few measurements when measuring on
  // the GPU; a 2D patch may allow hundreds).
  int64_t fits = 2, fails = cap + 1, stride = 1;
  while (fits + stride < fails) {
    const int64_t c = cost(plan.patch, topology, fits + stride);
    if (c > allowed) {
      fails = fits + stride;
      break;
    }
    fits += stride;
    plan.step_bytes = c;
    stride *= 2;
  }
  while (fails - fits > 1) {
    const int64_t mid = fits + (fails - fits) / 2;
    const int64_t c = cost(plan.patch, topology, mid);
    if (c > allowed) {
      fails = mid;
    } else {
      fits = mid;
      plan.step_bytes = c;
    }
  }
  plan.batch = fits;
  const std::string peak = fmt::format("{} {:.1f} GiB peak", plan.measured ? "measured" : "estimated",
                                       static_cast<double>(plan.step_bytes) / kGiB);
  const std::string budget = fmt::format("{:.0f} GiB{} x {}", static_cast<double>(plan.budget_bytes) / kGiB,
                                         plan.budget_assumed ? " (assumed)" : "", plan.margin);
  plan.reasons["data.patch_size"] =
      shrunk ? fmt::format("largest that fits {} with batch 2 ({}), median shape {}", budget, peak,
                           flow_list(plan.median_shape))
             : fmt::format(
                   "the median shape {} or less (256^3 voxels isotropic in mm, nnU-Net's start), padded up to the "
                   "strides' product (smaller cases are padded; smallest {}); fits {}",
                   flow_list(plan.median_shape), flow_list(smallest), budget);
  plan.reasons["data.batch_size"] =
      plan.batch + 1 > cap ? fmt::format("capped: {} x patch voxels <= 5% of the dataset's {} voxels (at least 2); {}",
                                         plan.batch, total, peak)
                           : fmt::format("most patches that fit {} ({})", budget, peak);
  Shape3 bottleneck{};
  for (int a = 0; a < 3; ++a) bottleneck[a] = plan.patch[a] / topology.divisor[a];
  plan.reasons["model.levels"] = fmt::format(
      "nnU-Net's topology at {:.3g} x {:.3g} x {:.3g} mm: {} -> {} voxels at the bottleneck (an axis is halved "
      "while it keeps >= {} and its spacing is within 2x of the finest)",
      grid[0], grid[1], grid[2], flow_list(plan.patch), flow_list(bottleneck), 2 * kMinBottleneck);
  plan.reasons["model.kernel_sizes"] = "3 on an axis once its spacing is within 2x of the finest, 1 before (nnU-Net)";
  return plan;
}

// nnU-Net's 2d configuration beside `full` (planner.h), and which configuration the rule prefers.
void plan_2d(const DatasetFingerprint& fp, const std::array<double, 3>& spacing, Plan two, const Measure& measure,
             Plan* full) {
  const Shape3& median = full->median_shape;  // as stored
  const auto flat = std::find(median.begin(), median.end(), 1);
  const bool one_slice = flat != median.end();
  two.slice_axis =
      one_slice ? flat - median.begin() : std::max_element(spacing.begin(), spacing.end()) - spacing.begin();
  two.configuration = "2d";
  two.dims = 2;
  two.max_filters = 512;  // nnU-Net's UNet_max_features_2d
  two = plan_at(fp, spacing, two, measure, /*stored=*/true);
  two.reasons["data.slice_axis"] =
      one_slice ? fmt::format("the cases are one voxel deep on axis {}", two.slice_axis)
                : fmt::format(
                      "the coarsest axis of the spacing {:.3g} x {:.3g} x {:.3g} mm (nnU-Net's transpose: 0 "
                      "when isotropic)",
                      spacing[0], spacing[1], spacing[2]);
  two.reasons["model.kernel_sizes"] = "1 on the slice axis (2D); in plane 3 once within 2x of the finest spacing";
  two.reasons["data.patch_size"] =
      "one slice; in-plane at most 2048^2 voxels (nnU-Net's 2d); " + two.reasons["data.patch_size"];
  if (one_slice) {
    full->preferred = "2d";
    full->preferred_reason = "the cases are one slice deep: nnU-Net plans only its 2d configuration for such data";
  } else if (full->anisotropic) {
    full->preferred = "2d";
    full->preferred_reason = fmt::format(
        "anisotropic spacing (axis {} coarser than 3x the finest, nnU-Net's ANISO_THRESHOLD): 2D on slices across it "
        "is often as good and cheaper; nnU-Net trains both and keeps the better by cross-validation",
        full->lowres_axis);
  } else {
    full->preferred = "3d_fullres";
    full->preferred_reason =
        "near-isotropic spacing: 3D context helps; nnU-Net trains both and keeps the better by cross-validation";
  }
  two.preferred = full->preferred;
  two.preferred_reason = full->preferred_reason;
  two.lowres_plan = nullptr;
  full->plan_2d = std::make_shared<const Plan>(two);
}

Plan make(const DatasetFingerprint& fp, const PlanOptions& options, const Measure& measure) {
  if (fp.cases.empty()) throw ConfigError("plan: the dataset has no cases");
  Plan plan;
  plan.task = options.task == "auto" ? fp.task : task_from_string(options.task);
  if (plan.task != fp.task) {
    throw ConfigError(
        fmt::format("--task: {} does not fit the dataset, whose task is {}", options.task, to_string(fp.task)));
  }
  if (!(options.margin > 0 && options.margin <= 1)) throw ConfigError("--margin: a share in (0, 1]");
  plan.margin = options.margin;
  plan.measured = static_cast<bool>(measure);
  double gib = options.gpu_memory_gib;
  if (gib <= 0 && measure) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) gib = static_cast<double>(total_b) / kGiB;
  }
  if (gib <= 0) {
    gib = kAssumedGiB;
    plan.budget_assumed = true;
  }
  plan.budget_bytes = static_cast<int64_t>(gib * kGiB);
  plan.in_channels = static_cast<int64_t>(fp.channels.size());
  plan.out_channels = plan.task == Task::kSegmentation ? fp.num_classes : 1;

  // Spacing.
  std::array<double, 3> spacing = fp.median_spacing;
  const auto mx = std::max_element(spacing.begin(), spacing.end());
  const double largest = *mx, finest = *std::min_element(spacing.begin(), spacing.end());  // before any change
  plan.reasons["spacing"] = "the median spacing";
  if (finest > 0 && largest / finest > 3) {
    const int axis = static_cast<int>(mx - spacing.begin());
    std::vector<double> along;
    for (const auto& c : fp.cases) along.push_back(c.spacing[axis]);
    double others = 0;
    for (int a = 0; a < 3; ++a) {
      if (a != axis) others = std::max(others, spacing[a]);
    }
    spacing[axis] = std::max(percentile(along, 10.0), others);
    plan.anisotropic = true;
    plan.lowres_axis = axis;
    plan.reasons["spacing"] =
        fmt::format("anisotropic (median spacing {:.3g}/{:.3g} > 3): axis {} takes the 10th percentile of its spacings",
                    largest, finest, axis);
  }
  for (const auto& c : fp.cases) {
    for (int a = 0; a < 3; ++a) {
      if (std::abs(c.spacing[a] - spacing[a]) > 1e-3 * spacing[a]) plan.resample_needed = true;
    }
  }
  // Normalisation.
  for (const auto& ch : fp.channels) {
    const std::string name = to_lower(ch.name);
    if (name == "ct" || ch.p00_5 < -500) {
      const double hi = std::max(ch.p99_5, ch.p00_5 + 1e-3);
      // Six significant digits: the statistics of a sample, not exact values (no 15-digit floats in the YAML).
      plan.normalize.push_back(
          fmt::format("ct:{:.6g}:{:.6g}:{:.6g}:{:.6g}", ch.p00_5, hi, ch.mean, std::max(ch.std, 1e-6)));
    } else if (ch.binary) {
      plan.normalize.push_back("none");
    } else {
      plan.normalize.push_back("zscore");
    }
  }
  const Plan base = plan;  // before the full-resolution choices
  plan = plan_at(fp, spacing, plan, measure, /*stored=*/true);

  // 3d_lowres: when the patch covers less than 1/8 of the median shape.
  if (voxels(plan.patch) * 8 < voxels(plan.median_shape)) {
    std::array<double, 3> s = spacing;
    Plan low = plan;
    for (int round = 0; round < 40; ++round) {
      // Anisotropic: the fine axes grow until they reach the coarse one, then every axis together.
      bool even = true;
      for (int a = 0; a < 3; ++a) even = even && (!plan.anisotropic || s[a] >= s[plan.lowres_axis]);
      for (int a = 0; a < 3; ++a) {
        if (even) {
          s[a] *= 1.25;
        } else if (a != plan.lowres_axis) {
          s[a] = std::min(s[a] * 1.25, s[plan.lowres_axis]);
        }
      }
      low = plan_at(fp, s, plan, measure, /*stored=*/false);
      if (voxels(low.median_shape) <= 4 * voxels(low.patch)) break;
    }
    low.configuration = "3d_lowres";
    low.lowres = true;
    low.resample_needed = true;
    low.lowres_plan = nullptr;
    low.reasons["spacing"] = fmt::format(
        "3d_lowres: the full-resolution patch covers {:.1f}% of the median shape (< 1/8); the spacing grows until the "
        "median shape is at most 4x the patch",
        100.0 * static_cast<double>(voxels(plan.patch)) / static_cast<double>(voxels(plan.median_shape)));
    plan.lowres_plan = std::make_shared<const Plan>(low);
  }
  plan_2d(fp, spacing, base, measure, &plan);
  return plan;
}

}  // namespace

Plan make_plan(const DatasetFingerprint& fp, const PlanOptions& options) { return make(fp, options, nullptr); }

Plan make_plan_measured(const DatasetFingerprint& fp, const PlanOptions& options, const TrainingSteps& steps) {
  if (!torch::cuda::is_available()) throw CudaError("plan --device cuda: no CUDA device to measure on");
  return make(fp, options, [&steps](const ModelConfig& m, int64_t in, int64_t out, const Shape3& p, int64_t batch) {
    const int64_t states = m.deep_supervision ? 1 : 2;  // the recipes: sgd (segmentation), adamw (dose)
    return measure_step_bytes_cuda(steps, m, in, out, p, batch, states);
  });
}

}  // namespace u3d
