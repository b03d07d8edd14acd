#include "u3d/plan/planner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/text.h"

#include "plan_text.h"

namespace u3d {
namespace {

using plan_detail::flow_list;
using plan_detail::kGiB;
using plan_detail::voxels;

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

// data.h5 -> data<suffix>.h5
std::string sibling_path(const std::string& data_path, const std::string& suffix) {
  const fs::path p(data_path);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}

// A path as a comment line shows it: as is, or JSON-quoted when it holds a line break or another
// control character (which would end the comment and start a line of YAML).
std::string comment_path(const std::string& path) {
  const bool plain =
      std::none_of(path.begin(), path.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
  return plain ? path : json_string(path);
}

// Whether this build's config knows `key` (model.dims and data.slice_axis arrive with the 2D network).
bool key_known(const std::string& key) {
  try {
    (void)get_value(Config{}, key);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// A 2D key: live when the config knows it, else a comment (the kernels and strides of 1 on the slice
// axis already make the equivalent network from the 3D one).
std::string key_2d(const std::string& section, const std::string& key, const std::string& value,
                   const std::string& reason) {
  if (key_known(section + "." + key)) return entry(key, value, reason);
  return fmt::format(
      "  # {}: {}   # {} (not a key of this build: the kernels and strides of 1 on the slice axis make the same "
      "network)\n",
      key, value, reason);
}

}  // namespace

std::string plan_yaml(const Plan& plan, const DatasetFingerprint& fp, const std::string& data_path,
                      const std::string& experiment_name) {
  const bool seg = plan.task == Task::kSegmentation;
  const bool has_val = fp.splits.count("val") > 0;
  const bool cascade = plan.configuration == "3d_cascade_fullres";
  const std::string path = plan.lowres ? sibling_path(data_path, "_lowres")
                           : cascade   ? sibling_path(data_path, "_cascade")
                                       : data_path;
  const std::string shown = comment_path(data_path), shown_path = comment_path(path);
  std::string y;
  y += fmt::format("# {} experiment planned by `trainer plan {}` ({} configuration, nnU-Net-like).\n",
                   seg ? "Segmentation" : "Dose (regression)", shown, plan.configuration);
  if (plan.memory_model == "nnunet") {
    y += fmt::format(
        "# nnU-Net's memory model (--memory-model nnunet, plan/nnunet_vram.h) at a {:.3g} GB target: nnU-Net's own\n"
        "# patch and batch rule, not bytes.\n",
        static_cast<double>(plan.budget_bytes) / kGiB);
  } else {
    y += fmt::format(
        "# GPU memory budget {:.1f} GiB{}, of which one training step may take {:.0f}%; the step's peak was {}\n",
        static_cast<double>(plan.budget_bytes) / kGiB, plan.budget_assumed ? " (assumed: no --gpu-memory)" : "",
        100 * plan.margin,
        plan.measured ? "measured on the GPU (bf16, as training runs)"
                      : "estimated by the memory model (plan/memory_model.h, bf16 activations)");
  }
  y += fmt::format("# Target spacing {} mm ({}); median shape {} {}.\n", spacing_text(plan.target_spacing),
                   reason_of(plan, "spacing"), plan.lowres ? "there" : "as stored", flow_list(plan.median_shape));
  if (plan.lowres && seg) {
    y += fmt::format(
        "# This low-resolution plan needs the dataset re-imported at that spacing, e.g.\n"
        "#   trainer import nnunet --source <raw dataset> --out {} --spacing {}\n"
        "# (the same import as {}, with --spacing). It is the cascade's first stage: train it with\n"
        "# cross-validation (--set data.folds=5 --fold all), whose out-of-fold predictions the second\n"
        "# stage trains on.\n",
        shown_path, spacing_text(plan.target_spacing), shown);
  } else if (plan.lowres) {  // nnU-Net's cascade is a segmentation configuration (trainer cascade)
    y += fmt::format(
        "# This low-resolution plan needs the dataset re-imported at that spacing: the same import as {}\n"
        "# with --spacing {} and --out {}. A {} run trains it on its own: nnU-Net's cascade\n"
        "# (`trainer cascade`) is a segmentation configuration.\n",
        shown, spacing_text(plan.target_spacing), shown_path, to_string(plan.task));
  } else if (cascade) {
    std::string first = experiment_name;
    if (ends_with(first, "_cascade")) first.resize(first.size() - std::string("_cascade").size());
    y += fmt::format(
        "# nnU-Net's cascade, second stage: the full-resolution plan with the first stage's segmentation\n"
        "# as {} more input channels. After the first stage ({}_lowres, its YAML beside this one) trained\n"
        "# all folds and predicted the test split (--fold all --predict-only --set predict.split=test):\n"
        "#   trainer cascade --previous runs/{}_lowres --data {} --out {}\n"
        "#   trainer --config THIS --set data.folds=5 --fold all\n",
        plan.in_channels - static_cast<int64_t>(fp.channels.size()), first, first, shown, shown_path);
  } else if (plan.resample_needed) {
    y += fmt::format(
        "# The cases are not all at the target spacing. This plan is for their grids as stored (training does\n"
        "# not resample); for nnU-Net's resampling, re-import with a NIfTI importer and plan again:\n"
        "#   trainer import nnunet|nifti ... --out {} --spacing {}\n"
        "# (a second file: this one keeps the native grids; the statistics stay the native ones).\n",
        comment_path(sibling_path(data_path, "_resampled")), spacing_text(plan.target_spacing));
  }
  if (plan.dims == 2 || plan.plan_2d) {
    y += fmt::format("# Preferred configuration: {} ({}).\n", plan.preferred, plan.preferred_reason);
  }
  if (plan.plan_2d) {
    y += fmt::format("# `trainer plan` also wrote a 2d plan (slices across axis {}, patch {}).\n",
                     plan.plan_2d->slice_axis, flow_list(plan.plan_2d->patch));
  }
  if (plan.lowres_plan) {
    y += fmt::format(
        "# The patch covers < 1/4 of the median volume: `trainer plan` also wrote a 3d_lowres plan\n"
        "# (spacing {} mm, patch {}){}.\n",
        spacing_text(plan.lowres_plan->target_spacing), flow_list(plan.lowres_plan->patch),
        plan.cascade_plan ? " and the cascade's second stage (3d_cascade_fullres)" : "");
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
  y += entry("path", json_string(path),
             plan.lowres ? "re-imported at the target spacing (see above)"
                         : (cascade ? "made by `trainer cascade` (see above)" : ""));
  if (plan.dims == 2) {
    y += key_2d("data", "slice_axis", std::to_string(plan.slice_axis), reason_of(plan, "data.slice_axis"));
  }
  y += entry("train_split", "train");
  y += entry("val_split", has_val ? "val" : "\"\"",
             has_val ? "the dataset's val split" : "the dataset has no val split: no validation");
  y +=
      "  # folds: 5                            # nnU-Net's 5-fold cross-validation: trainer --config THIS --fold all\n";
  y += entry("normalize", quoted_list(plan.normalize), reason_of(plan, "data.normalize"));
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
  if (plan.dims == 2) y += key_2d("model", "dims", "2", "a 2D U-Net (Conv2d) on slices across data.slice_axis");
  y += entry("levels", std::to_string(plan.levels), reason_of(plan, "model.levels"));
  y += entry("base_filters", "32");
  y += entry("max_filters", std::to_string(plan.max_filters), plan.dims == 2 ? "nnU-Net's 2d: 512" : "");
  y += entry("convs_per_level", "2");
  const auto triples = [](const std::vector<Shape3>& list) {
    std::vector<std::string> items;
    for (const Shape3& t : list) items.push_back(flow_list(t));
    return fmt::format("[{}]", fmt::join(items, ", "));
  };
  y += entry("kernel_sizes", triples(plan.kernels), reason_of(plan, "model.kernel_sizes"));
  y += entry("strides", triples(plan.strides), "per stage (D, H, W): nnU-Net's pool_op_kernel_sizes");
  y += entry("norm", "instance", plan.dims == 2 ? "nnU-Net's 2d too" : "batch 2 makes batch-norm statistics noisy");
  y += entry("activation", "leaky_relu");
  y += entry("negative_slope", "0.01");
  if (seg) {
    y += entry("deep_supervision", "true", "nnU-Net's " + plan.configuration);
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
