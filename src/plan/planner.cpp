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
#include "u3d/plan/nnunet_vram.h"
#include "u3d/plan/topology.h"

#include "plan_text.h"

namespace u3d {
namespace {

using plan_detail::flow_list;
using plan_detail::kGiB;
using plan_detail::voxels;

constexpr double kAssumedGiB = 80.0;
constexpr double kNnUNetDefaultGiB = 8.0;  // nnU-Net's default gpu_memory_target_in_gb
constexpr int64_t kMaxLevels = 8;          // model.levels' range (nnU-Net has no cap)
constexpr int64_t kMinBottleneck = 4;      // voxels per axis at the lowest resolution (nnU-Net's min edge)
constexpr double kBatchVoxelShare = 0.05;  // batch x patch voxels <= this share of the dataset's voxels
constexpr double kLowresThreshold = 0.25;  // nnU-Net's lowres_creation_threshold
constexpr double kLowresSpacingGrowth = 1.03;
constexpr int64_t kActivationBytes = 2;  // bf16 autocast, training.precision auto on CUDA
constexpr int64_t kSegLossTensors = 6;   // dice_ce: float logits, softmax, log-softmax, one-hot, products

using Measure = std::function<int64_t(const ModelConfig&, int64_t in, int64_t out, const Shape3&, int64_t batch)>;

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

// What a configuration is planned for: nnU-Net's get_plans_for_configuration arguments.
struct Grid {
  std::array<double, 3> spacing{};   // the target spacing recorded in the plan (mm)
  std::array<double, 3> topology{};  // the spacing of the grid trained on (the topology's)
  std::array<double, 3> median{};    // median shape in voxels (may be fractional, as nnU-Net's)
  double dataset_voxels = 0;         // median voxels x cases (nnU-Net's approximate_n_voxels_dataset)
  Shape3 smallest{};                 // the smallest case, per axis (for the reason line)
};

// Python's round(): half to even (the default rounding mode).
int64_t py_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// The plan on `grid`: levels, patch, batch and their reasons (nnU-Net's get_plans_for_configuration).
// plan.slice_axis >= 0: a 2D plan, patch 1 on that axis (nnU-Net's 2d configuration).
Plan plan_at(const Grid& grid, Plan plan, const Measure& measure) {
  for (int a = 0; a < 3; ++a) plan.median_shape[a] = std::max<int64_t>(1, py_round(grid.median[a]));
  plan.target_spacing = grid.spacing;
  const bool nnunet = plan.memory_model == "nnunet";
  const bool two_d = plan.slice_axis >= 0;
  const NnUNetReference reference = nnunet_reference(two_d, static_cast<double>(plan.budget_bytes) / kGiB);
  const double allowed = nnunet ? reference.elements : plan.margin * static_cast<double>(plan.budget_bytes);
  const int64_t states = plan.task == Task::kSegmentation ? 1 : 2;  // sgd momentum | adamw moments
  const int64_t loss = plan.task == Task::kSegmentation ? kSegLossTensors : 3;
  // The step's cost: bytes (memory model or measured), or nnU-Net's elements scaled to its reference batch.
  auto cost = [&](const Shape3& p, const Topology& t, int64_t batch) -> double {
    if (nnunet) {
      return nnunet_feature_map_elements(t, {32, plan.max_filters}, plan.out_channels, p) * static_cast<double>(batch) /
             static_cast<double>(reference.batch);
    }
    const ModelConfig m = recipe_model(plan.task, t, plan.max_filters);
    if (measure) return static_cast<double>(measure(m, plan.in_channels, plan.out_channels, p, batch));
    return static_cast<double>(
        estimate_step_bytes(m, plan.in_channels, plan.out_channels, p, batch, kActivationBytes, states, loss));
  };
  // nnU-Net's topology (plan/topology.h) for the patch, which is then padded up to the topology's
  // divisor per axis: the patch may exceed the median and the smallest case (the cache pads them).
  auto topology_and_pad = [&](Shape3* p) {
    const Topology t = topology_for(plan, grid.topology, *p);
    for (int a = 0; a < 3; ++a)
      (*p)[a] = (std::max<int64_t>(1, (*p)[a]) + t.divisor[a] - 1) / t.divisor[a] * t.divisor[a];
    return t;
  };
  // nnU-Net's start: 256^3 voxels (2d: 2048^2) isotropic in millimetres, at most the median shape
  // (whose fraction the padding rounds up).
  std::array<double, 3> inverse{};
  double volume = 1;
  for (int a = 0; a < 3; ++a) {
    inverse[a] = two_d && a == plan.slice_axis ? 1.0 : 1.0 / grid.topology[a];
    volume *= inverse[a];
  }
  const double scale = two_d ? std::sqrt(2048.0 * 2048.0 / volume) : std::cbrt(256.0 * 256.0 * 256.0 / volume);
  Shape3 p{};
  for (int a = 0; a < 3; ++a) {
    p[a] = two_d && a == plan.slice_axis ? 1
                                         : static_cast<int64_t>(std::ceil(std::min(
                                               static_cast<double>(py_round(inverse[a] * scale)), grid.median[a])));
  }
  Topology topology = topology_and_pad(&p);
  bool shrunk = false;
  double c = cost(p, topology, 2);
  while (c > allowed) {
    // nnU-Net: shrink the axis largest relative to the median shape (ties: the last) by the divisor of
    // the patch shrunk once, then take the topology of the new patch.
    int best = -1;
    int64_t step = 0;
    for (int a = 0; a < 3; ++a) {
      if (p[a] <= 1) continue;
      Shape3 tmp = p;
      tmp[a] = std::max<int64_t>(1, tmp[a] - topology.divisor[a]);
      const int64_t d = topology_for(plan, grid.topology, tmp).divisor[a];
      if (p[a] - d < 1) continue;
      if (best < 0 || static_cast<double>(p[a]) / grid.median[a] >= static_cast<double>(p[best]) / grid.median[best]) {
        best = a;
        step = d;
      }
    }
    if (best < 0) {
      throw ConfigError(
          fmt::format("plan: not even a {} patch with batch 2 fits {:.1f} GiB{}; give more memory with --gpu-memory",
                      flow_list(p), static_cast<double>(plan.budget_bytes) / kGiB,
                      nnunet ? " by nnU-Net's memory model"
                             : fmt::format(" x margin {} ({:.2f} GiB needed)", plan.margin, c / kGiB)));
    }
    p[best] -= step;
    topology = topology_and_pad(&p);
    c = cost(p, topology, 2);
    shrunk = true;
  }
  plan.patch = p;
  plan.step_bytes = nnunet ? 0 : static_cast<int64_t>(c);
  plan.levels = topology.stages();
  plan.strides = topology.strides;
  plan.kernels = topology.kernels;
  // Batch: capped so one batch covers at most 5% of the dataset's voxels, rounded as nnU-Net (at least 2).
  const int64_t cap =
      std::max<int64_t>(2, py_round(kBatchVoxelShare * grid.dataset_voxels / static_cast<double>(voxels(plan.patch))));
  int64_t fits = 2;
  if (nnunet) {  // nnU-Net: the reference's batch scaled by the headroom
    const double elements = cost(plan.patch, topology, reference.batch);  // one sample's
    fits = std::max<int64_t>(
        2, std::min(cap, py_round(reference.elements / elements * static_cast<double>(reference.batch))));
  } else {
    // As many as fit: the cost grows with the batch; doubling steps, then bisection (few measurements
    // when measuring on the GPU; a 2D patch may allow hundreds).
    int64_t fails = cap + 1, stride = 1;
    while (fits + stride < fails) {
      const double cb = cost(plan.patch, topology, fits + stride);
      if (cb > allowed) {
        fails = fits + stride;
        break;
      }
      fits += stride;
      plan.step_bytes = static_cast<int64_t>(cb);
      stride *= 2;
    }
    while (fails - fits > 1) {
      const int64_t mid = fits + (fails - fits) / 2;
      const double cb = cost(plan.patch, topology, mid);
      if (cb > allowed) {
        fails = mid;
      } else {
        fits = mid;
        plan.step_bytes = static_cast<int64_t>(cb);
      }
    }
  }
  plan.batch = fits;
  const std::string budget =
      nnunet ? fmt::format("nnU-Net's memory model at {:.3g} GB ({:.4g}e6 feature-map elements at batch {})",
                           static_cast<double>(plan.budget_bytes) / kGiB, reference.elements / 1e6, reference.batch)
             : fmt::format("{:.0f} GiB{} x {}", static_cast<double>(plan.budget_bytes) / kGiB,
                           plan.budget_assumed ? " (assumed)" : "", plan.margin);
  const std::string peak =
      nnunet ? fmt::format("{:.4g}e6 elements per patch", cost(plan.patch, topology, reference.batch) / 1e6)
             : fmt::format("{} {:.1f} GiB peak", plan.measured ? "measured" : "estimated",
                           static_cast<double>(plan.step_bytes) / kGiB);
  plan.reasons["data.patch_size"] =
      shrunk ? fmt::format("largest that fits {} with batch 2 ({}), median shape {}", budget, peak,
                           flow_list(plan.median_shape))
             : fmt::format(
                   "the median shape {} or less (256^3 voxels isotropic in mm, nnU-Net's start), padded up to the "
                   "strides' product (smaller cases are padded; smallest {}); fits {}",
                   flow_list(plan.median_shape), flow_list(grid.smallest), budget);
  plan.reasons["data.batch_size"] =
      plan.batch >= cap
          ? fmt::format(
                "capped: {} x patch voxels <= 5% of the dataset's {:.0f} voxels (median x cases; at least 2); {}",
                plan.batch, grid.dataset_voxels, peak)
          : fmt::format("{} {} ({})", nnunet ? "nnU-Net's batch for" : "most patches that fit", budget, peak);
  Shape3 bottleneck{};
  for (int a = 0; a < 3; ++a) bottleneck[a] = plan.patch[a] / topology.divisor[a];
  plan.reasons["model.levels"] = fmt::format(
      "nnU-Net's topology at {:.3g} x {:.3g} x {:.3g} mm: {} -> {} voxels at the bottleneck (an axis is halved "
      "while it keeps >= {} and its spacing is within 2x of the finest)",
      grid.topology[0], grid.topology[1], grid.topology[2], flow_list(plan.patch), flow_list(bottleneck),
      2 * kMinBottleneck);
  plan.reasons["model.kernel_sizes"] = "3 on an axis once its spacing is within 2x of the finest, 1 before (nnU-Net)";
  return plan;
}

// nnU-Net's 2d configuration beside `full` (planner.h), and which configuration the rule prefers.
void plan_2d(const Grid& grid, Plan two, const Measure& measure, Plan* full) {
  const std::array<double, 3>& spacing = grid.spacing;
  const Shape3& median = full->median_shape;  // as stored
  const auto flat = std::find(median.begin(), median.end(), 1);
  const bool one_slice = flat != median.end();
  const auto coarse = std::max_element(spacing.begin(), spacing.end());
  const auto finest = std::min_element(spacing.begin(), spacing.end());
  two.slice_axis = one_slice ? flat - median.begin() : coarse - spacing.begin();
  two.configuration = "2d";
  two.dims = 2;
  two.max_filters = 512;  // nnU-Net's UNet_max_features_2d
  two = plan_at(grid, two, measure);
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
  } else if (full->anisotropic || *coarse > 3 * *finest) {  // the spacing alone (planner.h), not its voxel counts
    full->preferred = "2d";
    full->preferred_reason = fmt::format(
        "anisotropic spacing (axis {} coarser than 3x the finest, nnU-Net's ANISO_THRESHOLD): 2D on slices across it "
        "is often as good and cheaper; nnU-Net trains both and keeps the better by cross-validation",
        full->anisotropic ? full->lowres_axis : coarse - spacing.begin());
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
  if (options.memory_model != "bytes" && options.memory_model != "nnunet") {
    throw ConfigError(fmt::format("--memory-model: '{}' is not bytes or nnunet", options.memory_model));
  }
  plan.memory_model = options.memory_model;
  if (plan.memory_model == "nnunet" && measure) {
    throw ConfigError("--memory-model nnunet counts nnU-Net's feature maps and measures nothing; use --device cpu");
  }
  double gib = options.gpu_memory_gib;
  if (gib <= 0 && plan.memory_model == "nnunet") gib = kNnUNetDefaultGiB;
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

  // Spacing (nnU-Net's determine_fullres_target_spacing): the median; anisotropic when the coarsest
  // axis's spacing is > 3x every other's and its median size < 1/3 of every other's, then that axis
  // takes the 10th percentile of its spacings (at least the other axes' largest, + 1e-5).
  std::array<double, 3> spacing = fp.median_spacing;
  const int axis = static_cast<int>(std::max_element(spacing.begin(), spacing.end()) - spacing.begin());
  double others = 0;
  double other_size = std::numeric_limits<double>::infinity();
  std::vector<double> sizes[3];
  for (const auto& c : fp.cases) {
    for (int a = 0; a < 3; ++a) sizes[a].push_back(static_cast<double>(c.shape[a]));
  }
  for (int a = 0; a < 3; ++a) {
    if (a == axis) continue;
    others = std::max(others, spacing[a]);
    other_size = std::min(other_size, percentile(sizes[a], 50.0));
  }
  plan.reasons["spacing"] = "the median spacing";
  if (spacing[axis] > 3 * others && percentile(sizes[axis], 50.0) * 3 < other_size) {
    std::vector<double> along;
    for (const auto& c : fp.cases) along.push_back(c.spacing[axis]);
    const double median = spacing[axis];
    spacing[axis] = percentile(along, 10.0);
    if (spacing[axis] < others) spacing[axis] = others + 1e-5;
    plan.anisotropic = true;
    plan.lowres_axis = axis;
    plan.reasons["spacing"] = fmt::format(
        "anisotropic (median spacing {:.3g} > 3 x {:.3g}, and < 1/3 of the voxels): axis {} takes the 10th percentile "
        "of its spacings",
        median, others, axis);
  }
  for (const auto& c : fp.cases) {
    for (int a = 0; a < 3; ++a) {
      if (std::abs(c.spacing[a] - spacing[a]) > 1e-3 * spacing[a]) plan.resample_needed = true;
    }
  }
  // Normalisation: what the importer recorded (statistics of the native-resolution images), unless
  // asked to renormalise or the file records none; else from the fingerprint.
  const bool recorded = !options.recorded_normalize.empty() && !options.renormalize;
  if (recorded && options.recorded_normalize.size() != fp.channels.size()) {
    throw ConfigError(fmt::format("plan: the dataset records {} normalisation specs for {} channels",
                                  options.recorded_normalize.size(), fp.channels.size()));
  }
  for (size_t k = 0; k < fp.channels.size(); ++k) {
    const auto& ch = fp.channels[k];
    const std::string name = to_lower(ch.name);
    if (recorded) {
      plan.normalize.push_back(options.recorded_normalize[k]);
    } else if (name == "ct" || ch.p00_5 < -500) {
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
  plan.reasons["data.normalize"] =
      recorded ? "as the importer recorded it (native-resolution statistics); trainer plan --renormalize recomputes it"
               : "CT-like: ct:P0.5:P99.5:MEAN:STD of the foreground; 0/1 masks: none; others: zscore";
  // The full-resolution grid: the cases as stored (training does not resample), nnU-Net's median.
  Grid grid;
  grid.spacing = spacing;
  grid.topology = fp.median_spacing;
  grid.smallest = fp.cases.front().shape;
  for (int a = 0; a < 3; ++a) {
    std::vector<double> v;
    for (const auto& c : fp.cases) {
      v.push_back(static_cast<double>(c.shape[a]));
      grid.smallest[a] = std::min(grid.smallest[a], c.shape[a]);
    }
    grid.median[a] = percentile(v, 50.0);
  }
  const double cases = static_cast<double>(fp.cases.size());
  grid.dataset_voxels = grid.median[0] * grid.median[1] * grid.median[2] * cases;
  const Plan base = plan;  // before the full-resolution choices
  plan = plan_at(grid, plan, measure);

  // 3d_lowres, nnU-Net's rule: when the patch covers less than 1/4 of the median volume, the spacing
  // grows by 3% per round (the axes finer than half the coarsest first) until the patch covers 1/4 of
  // the median volume at that spacing; dropped when that volume is not at least 2x smaller.
  const double median_voxels = grid.median[0] * grid.median[1] * grid.median[2];
  if (static_cast<double>(voxels(plan.patch)) / median_voxels < kLowresThreshold) {
    Grid low_grid = grid;
    double low_voxels = median_voxels;
    Plan low = plan;
    for (int round = 0; round < 1000 && static_cast<double>(voxels(low.patch)) / low_voxels < kLowresThreshold;
         ++round) {
      std::array<double, 3>& s = low_grid.spacing;
      const double coarsest = *std::max_element(s.begin(), s.end());
      bool uneven = false;
      for (int a = 0; a < 3; ++a) uneven = uneven || coarsest / s[a] > 2;
      for (int a = 0; a < 3; ++a) {
        if (!uneven || coarsest / s[a] > 2) s[a] *= kLowresSpacingGrowth;
      }
      low_voxels = 1;
      for (int a = 0; a < 3; ++a) {
        const double scaled = grid.spacing[a] / s[a] * grid.median[a];
        low_grid.median[a] = static_cast<double>(py_round(scaled));  // nnU-Net rounds the median here
        low_grid.smallest[a] =
            std::max<int64_t>(1, py_round(grid.spacing[a] / s[a] * static_cast<double>(grid.smallest[a])));
        low_voxels *= scaled;
      }
      low_grid.topology = s;
      low_grid.dataset_voxels = low_voxels * cases;
      low = plan_at(low_grid, plan, measure);
    }
    if (median_voxels / low_voxels >= 2) {
      low.configuration = "3d_lowres";
      low.lowres = true;
      low.resample_needed = true;
      low.lowres_plan = nullptr;
      low.reasons["spacing"] = fmt::format(
          "3d_lowres: the full-resolution patch covers {:.1f}% of the median volume (< 1/4); the spacing grew by 3% "
          "per round until the patch covers 1/4 of the median volume there (nnU-Net's rule)",
          100.0 * static_cast<double>(voxels(plan.patch)) / median_voxels);
      plan.lowres_plan = std::make_shared<const Plan>(low);
      if (plan.task == Task::kSegmentation) {
        Plan cascade = plan;
        cascade.configuration = "3d_cascade_fullres";
        cascade.lowres_plan = nullptr;
        cascade.in_channels += plan.out_channels - 1;
        for (int64_t c = 1; c < plan.out_channels; ++c) cascade.normalize.push_back("none");
        cascade.reasons["data.normalize"] =
            plan.reasons["data.normalize"] + "; the first stage's segmentation channels: none (0/1)";
        plan.cascade_plan = std::make_shared<const Plan>(cascade);
      }
    } else {
      plan.reasons["lowres"] = fmt::format(
          "no 3d_lowres: at the spacing where the patch covers 1/4 of the median volume that volume is only {:.2f}x "
          "smaller (nnU-Net drops it below 2x)",
          median_voxels / low_voxels);
    }
  }
  plan_2d(grid, base, measure, &plan);
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
