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

namespace u3d {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kAssumedGiB = 80.0;
constexpr int64_t kMaxLevels = 6;
constexpr int64_t kMinBottleneck = 4;      // voxels per axis at the lowest resolution
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

// At least 2 (one down-sampling) even for volumes too small for a 4-voxel bottleneck (the search caps it
// with levels_fitting: a case shorter than 2^(levels - 1) on an axis cannot be down-sampled that often).
int64_t levels_for(const Shape3& patch) {
  int64_t levels = 2;
  const int64_t smallest = *std::min_element(patch.begin(), patch.end());
  while (levels < kMaxLevels && (smallest >> levels) >= kMinBottleneck) ++levels;
  return levels;
}

// The most levels every case allows: each level halves every axis, so 2^(levels - 1) must not exceed
// the shortest axis of the smallest case (1 for a volume one voxel deep: no down-sampling).
int64_t levels_fitting(const Shape3& smallest) {
  const int64_t shortest = *std::min_element(smallest.begin(), smallest.end());
  int64_t levels = 1;
  while (levels < kMaxLevels && (int64_t{1} << levels) <= shortest) ++levels;
  return levels;
}

int64_t voxels(const Shape3& s) { return s[0] * s[1] * s[2]; }

ModelConfig recipe_model(Task task, int64_t levels) {
  ModelConfig m;
  m.architecture = Architecture::kUNet;
  m.levels = levels;
  m.base_filters = 32;
  m.max_filters = 320;
  m.convs_per_level = 2;
  m.kernel_size = 3;
  m.norm = Norm::kInstance;
  m.activation = Activation::kLeakyRelu;
  m.negative_slope = 0.01;
  m.deep_supervision = task == Task::kSegmentation;
  m.output_activation = task == Task::kSegmentation ? OutputActivation::kNone : OutputActivation::kRelu;
  return m;
}

// A shape as a YAML flow list: "[128, 128, 64]".
std::string flow_list(const Shape3& s) { return fmt::format("[{}, {}, {}]", s[0], s[1], s[2]); }

// The plan at `spacing`: levels, patch, batch and their reasons. `stored`: plan for the cases'
// grids as stored in the file (what the trainer trains on: it does not resample), not resampled.
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
  auto cost = [&](const Shape3& p, int64_t levels, int64_t batch) {
    const ModelConfig m = recipe_model(plan.task, levels);
    if (measure) return measure(m, plan.in_channels, plan.out_channels, p, batch);
    return estimate_step_bytes(m, plan.in_channels, plan.out_channels, p, batch, kActivationBytes, states, loss);
  };
  // The search: levels from the patch (at most what the smallest case allows), the patch rounded down
  // to 2^(levels - 1) within its caps.
  const int64_t fitting = levels_fitting(smallest);
  auto round_patch = [&](const std::array<double, 3>& want, int64_t* levels_out) {
    Shape3 p{};
    for (int a = 0; a < 3; ++a) p[a] = std::max<int64_t>(1, std::llround(want[a]));
    for (int pass = 0; pass < 2; ++pass) {  // levels from the patch, then the patch from the levels
      const int64_t d = int64_t{1} << (std::min(levels_for(p), fitting) - 1);
      for (int a = 0; a < 3; ++a) {
        const int64_t cap = std::min((plan.median_shape[a] + d - 1) / d * d, smallest[a] / d * d);
        p[a] = std::max(d, std::min(p[a] / d * d, std::max(d, cap)));
      }
    }
    *levels_out = std::min(levels_for(p), fitting);
    return p;
  };
  std::array<double, 3> want{};
  for (int a = 0; a < 3; ++a) want[a] = static_cast<double>(plan.median_shape[a]);
  bool shrunk = false;
  int64_t levels = 0;
  Shape3 p = round_patch(want, &levels);
  while (true) {
    const int64_t c = cost(p, levels, 2);
    if (c <= allowed) {
      plan.patch = p;
      plan.levels = levels;
      plan.step_bytes = c;
      break;
    }
    // Shrink the largest axis (ties: the one largest relative to the median shape) to the next
    // smaller size the rounding allows.
    int best = 0;
    for (int a = 1; a < 3; ++a) {
      const double ra = static_cast<double>(p[a]) / static_cast<double>(plan.median_shape[a]);
      const double rb = static_cast<double>(p[best]) / static_cast<double>(plan.median_shape[best]);
      if (p[a] > p[best] || (p[a] == p[best] && ra > rb)) best = a;
    }
    if (p[best] <= 8) {
      throw ConfigError(fmt::format(
          "plan: not even a {} patch with batch 2 fits {:.1f} GiB x margin {} ({:.2f} GiB "
          "needed); give more memory with --gpu-memory",
          flow_list(p), static_cast<double>(plan.budget_bytes) / kGiB, plan.margin, static_cast<double>(c) / kGiB));
    }
    for (int a = 0; a < 3; ++a) want[a] = static_cast<double>(p[a]);
    Shape3 next = p;
    while (next == p && want[best] > 1) {
      want[best] -= 1;
      next = round_patch(want, &levels);
    }
    p = next;
    shrunk = true;
  }
  // Batch: as many as fit, capped by the share of the dataset's voxels.
  const int64_t cap = std::max<int64_t>(
      2, static_cast<int64_t>(kBatchVoxelShare * static_cast<double>(total) / static_cast<double>(voxels(plan.patch))));
  plan.batch = 2;
  while (plan.batch + 1 <= cap) {
    const int64_t c = cost(plan.patch, plan.levels, plan.batch + 1);
    if (c > allowed) break;
    ++plan.batch;
    plan.step_bytes = c;
  }
  const std::string peak = fmt::format("{} {:.1f} GiB peak", plan.measured ? "measured" : "estimated",
                                       static_cast<double>(plan.step_bytes) / kGiB);
  const std::string budget = fmt::format("{:.0f} GiB{} x {}", static_cast<double>(plan.budget_bytes) / kGiB,
                                         plan.budget_assumed ? " (assumed)" : "", plan.margin);
  plan.reasons["data.patch_size"] =
      shrunk ? fmt::format("largest that fits {} with batch 2 ({}), median shape {}", budget, peak,
                           flow_list(plan.median_shape))
             : fmt::format("the median shape {} (rounded to 2^(levels - 1), at most the smallest case {}); fits {}",
                           flow_list(plan.median_shape), flow_list(smallest), budget);
  plan.reasons["data.batch_size"] =
      plan.batch + 1 > cap ? fmt::format("capped: {} x patch voxels <= 5% of the dataset's {} voxels (at least 2); {}",
                                         plan.batch, total, peak)
                           : fmt::format("most patches that fit {} ({})", budget, peak);
  const Shape3 bottleneck = {plan.patch[0] >> (plan.levels - 1), plan.patch[1] >> (plan.levels - 1),
                             plan.patch[2] >> (plan.levels - 1)};
  plan.reasons["model.levels"] =
      levels_for(plan.patch) > fitting
          ? fmt::format(
                "at most {}: every level halves every axis and the smallest case is {} ({} -> {} voxels at the "
                "bottleneck)",
                fitting, flow_list(smallest), flow_list(plan.patch), flow_list(bottleneck))
          : fmt::format("{} -> {} voxels at the bottleneck (>= {} per axis, at most {} levels)", flow_list(plan.patch),
                        flow_list(bottleneck), kMinBottleneck, kMaxLevels);
  return plan;
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
  const auto mn = std::min_element(spacing.begin(), spacing.end());
  plan.reasons["spacing"] = "the median spacing";
  if (*mn > 0 && *mx / *mn > 3) {
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
                    *mx, *mn, axis);
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

namespace u3d {
namespace {

// "key: value   # reason" under a section (two spaces in).
std::string entry(const std::string& key, const std::string& value, const std::string& reason = "") {
  std::string line = fmt::format("  {}: {}", key, value);
  if (reason.empty()) return line + "\n";
  return fmt::format("{:<40} # {}\n", line, reason);
}

// Several entry() lines: {key, value} or {key, value, reason}.
struct Entry {
  const char* key;
  const char* value;
  const char* reason = "";
};
std::string entries(std::initializer_list<Entry> rows) {
  std::string out;
  for (const auto& r : rows) out += entry(r.key, r.value, r.reason);
  return out;
}

std::string reason_of(const Plan& plan, const std::string& key) {
  const auto it = plan.reasons.find(key);
  return it == plan.reasons.end() ? std::string() : it->second;
}

// A YAML flow list of quoted strings: ["ct:...", "none"].
std::string quoted_list(const std::vector<std::string>& items) { return json_line(Json(items)); }

std::string spacing_text(const std::array<double, 3>& s) {
  return fmt::format("{:.4g},{:.4g},{:.4g}", s[0], s[1], s[2]);
}

std::string lowres_path(const std::string& data_path) {
  const fs::path p(data_path);
  return (p.parent_path() / (p.stem().string() + "_lowres" + p.extension().string())).string();
}

// A path as a comment line shows it: as is, or JSON-quoted when it holds a line break or another
// control character (which would end the comment and start a line of YAML).
std::string comment_path(const std::string& path) {
  const bool plain =
      std::none_of(path.begin(), path.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  return plain ? path : json_string(path);
}

}  // namespace

std::string plan_yaml(const Plan& plan, const DatasetFingerprint& fp, const std::string& data_path,
                      const std::string& experiment_name) {
  const bool seg = plan.task == Task::kSegmentation;
  const bool has_val = fp.splits.count("val") > 0;
  const std::string path = plan.lowres ? lowres_path(data_path) : data_path;
  const std::string shown = comment_path(data_path), shown_path = comment_path(path);
  std::string y;
  y += fmt::format("# {} experiment planned by `trainer plan {}` ({} configuration, nnU-Net-like).\n",
                   seg ? "Segmentation" : "Dose (regression)", shown, plan.configuration);
  y += fmt::format(
      "# GPU memory budget {:.1f} GiB{}, of which one training step may take {:.0f}%; the step's peak was {}\n",
      static_cast<double>(plan.budget_bytes) / kGiB, plan.budget_assumed ? " (assumed: no --gpu-memory)" : "",
      100 * plan.margin,
      plan.measured ? "measured on the GPU (bf16, as training runs)"
                    : "estimated by the memory model (plan/memory_model.h, bf16 activations)");
  y += fmt::format("# Target spacing {} mm ({}); median shape {} {}.\n", spacing_text(plan.target_spacing),
                   reason_of(plan, "spacing"), plan.lowres ? "there" : "as stored", flow_list(plan.median_shape));
  if (plan.lowres) {
    y += fmt::format(
        "# This low-resolution plan needs the dataset re-imported at that spacing, e.g.\n"
        "#   trainer import nnunet --source <raw dataset> --out {} --spacing {}\n"
        "# (the same import as {}, with --spacing).\n",
        shown_path, spacing_text(plan.target_spacing), shown);
  } else if (plan.resample_needed) {
    y += fmt::format(
        "# The cases are not all at the target spacing. This plan is for their grids as stored (training does\n"
        "# not resample); for nnU-Net's resampling, re-import with a NIfTI importer and plan again:\n"
        "#   trainer import nnunet|nifti ... --out {} --spacing {}\n",
        shown, spacing_text(plan.target_spacing));
  }
  if (plan.lowres_plan) {
    y += fmt::format(
        "# The patch covers < 1/8 of the median shape: `trainer plan` also wrote a 3d_lowres plan\n"
        "# (spacing {} mm, patch {}).\n",
        spacing_text(plan.lowres_plan->target_spacing), flow_list(plan.lowres_plan->patch));
  }
  y += "# Dataset fingerprint:\n";
  for (const auto& line : split(fingerprint_table(fp), "\n")) {
    if (!line.empty()) y += "#" + line + "\n";
  }
  y += "experiment:\n";
  y += entry("name", json_string(experiment_name));
  y += entry("output_dir", "runs");
  y += entry("seed", seg ? "12345" : "42");
  y += "data:\n";
  y += entry("path", json_string(path), plan.lowres ? "re-imported at the target spacing (see above)" : "");
  y += entry("train_split", "train");
  y += entry("val_split", has_val ? "val" : "\"\"",
             has_val ? "the dataset's val split" : "the dataset has no val split: no validation");
  y +=
      "  # folds: 5                            # nnU-Net's 5-fold cross-validation: trainer --config THIS --fold all\n";
  y += entry("normalize", quoted_list(plan.normalize),
             "CT-like: ct:P0.5:P99.5:MEAN:STD of the foreground; 0/1 masks: none; others: zscore");
  y += entry("batch_size", std::to_string(plan.batch), reason_of(plan, "data.batch_size"));
  y += entry("patch_size", flow_list(plan.patch), reason_of(plan, "data.patch_size"));
  const bool whole = voxels(plan.patch) >= voxels(plan.median_shape);
  if (seg) {
    y += entry("foreground_fraction", "0.33", "a third of the patches centred on a foreground voxel (nnU-Net)");
    y += entry("foreground", "target");
  } else {
    y += entry("target_scale", fmt::format("{}", std::max(1.0, std::ceil(fp.target_max))),
               "targets divided by their maximum: near [0, 1]");
    y += entry("foreground_fraction", whole ? "0.0" : "0.33",
               whole ? "whole volumes: nothing to centre" : "a third of the patches centred where the target is > 0");
    y += entry("dvh_structures", "[auto]", "OpenKBP DVH scores when the structure channels are present");
  }
  y += "augment:\n";
  y += entry("flip_prob", "0.5", "mirroring per axis");
  y += "model:\n";
  y += entry("architecture", "unet");
  y += entry("levels", std::to_string(plan.levels), reason_of(plan, "model.levels"));
  y += entry("base_filters", "32");
  y += entry("max_filters", "320");
  y += entry("convs_per_level", "2");
  y += entry("kernel_size", "3");
  y += entry("norm", "instance", "batch 2 makes batch-norm statistics noisy");
  y += entry("activation", "leaky_relu");
  y += entry("negative_slope", "0.01");
  if (seg) {
    y += entry("deep_supervision", "true", "nnU-Net's 3d_fullres");
  } else {
    y += entry("dropout", "0.0");
    y += entry("output_activation", "relu", "dose is never negative");
  }
  y += "training:\n";
  y += entry("device", "auto", "CUDA when available, else CPU");
  if (seg) {
    y += entries({{"epochs", "1000", "nnU-Net: 1000 epochs of 250 steps"},
                  {"steps_per_epoch", "250"},
                  {"optimizer", "sgd"},
                  {"lr", "0.01"},
                  {"momentum", "0.99"},
                  {"nesterov", "true"},
                  {"weight_decay", "3.0e-5"},
                  {"lr_schedule", "poly"},
                  {"poly_power", "0.9"},
                  {"loss", "dice_ce"},
                  {"grad_clip_norm", "12"}});
    if (has_val) {
      y += entry("val_patch_batches", "50", "nnU-Net's pseudo-Dice every epoch");
      y += entry("pseudo_dice_ema", "0.9");
    }
    y += entry("val_full", "true");
    y += entry("val_every", "50");
  } else {
    y += entries({{"epochs", "300"},
                  {"steps_per_epoch", "0", "every training case once per epoch"},
                  {"optimizer", "adamw"},
                  {"lr", "0.001"},
                  {"min_lr", "0.000001"},
                  {"weight_decay", "0.0001"},
                  {"betas", "[0.9, 0.999]"},
                  {"lr_schedule", "cosine"},
                  {"warmup_steps", "500"}});
    y += entry("loss", fp.mask_share < 1.0 ? "masked_l1" : "l1",
               fp.mask_share < 1.0 ? "L1 inside the loss mask" : "the dataset has no loss mask");
    y += entry("grad_clip_norm", "12.0");
    y += entry("val_every", "5");
  }
  y += "checkpoint:\n";
  y += entry("every_epochs", seg ? "50" : "5");
  y += entry("keep_last", "2");
  y += entry("monitor", seg && has_val ? "pseudo_dice_ema" : "auto");
  y += "predict:\n";
  const std::string predict_split = fp.splits.count("test") ? "test" : (has_val ? "val" : "train");
  y += entry("split", predict_split);
  y += entry("overlap", whole ? "0.0" : "0.5", whole ? "whole volumes: one window" : "half a patch");
  y += entry("gaussian", whole ? "false" : "true");
  y += entry("tta", "flips", "all 8 mirrorings, batched into one forward pass");
  y += "logging:\n";
  y += entry("progress_seconds", seg ? "60" : "30");
  return y;
}

}  // namespace u3d
