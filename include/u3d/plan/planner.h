// nnU-Net-like self-configuration: from a dataset fingerprint (plan/fingerprint.h) and a GPU
// memory budget, the experiment `trainer plan` writes (a commented YAML config that load_config
// reads as is).
//
//   Plan plan = make_plan(fp, options);                 // estimate only (plan/memory_model.h)
//   write_file_atomic("exp.yaml", plan_yaml(plan, fp, "data/liver.h5", "liver_fullres"));
//
// Choices (each recorded with its reason in Plan::reasons, key -> one line):
//   - target spacing: the median spacing (mm, (D, H, W)); when its largest / smallest axis > 3
//     (anisotropic), the low-resolution axis takes the 10th percentile of the cases' spacings on
//     that axis (at least the largest other axis), as nnU-Net;
//   - the full-resolution plan is made for the cases' grids as stored (training does not resample;
//     when they are not at the target spacing, the YAML says how to re-import at it); the
//     low-resolution plan for the median shape resampled to its spacing;
//   - patch: the median shape (at most the smallest case: the sampler refuses a patch larger than
//     any case), rounded down to the strides' product per axis; the axis largest relative to the
//     median shape shrunk by its divisor at a time until the step (batch 2) fits margin x budget (nnU-Net);
//   - topology (model.levels, model.strides, model.kernel_sizes): nnU-Net's for the patch at the
//     grid's spacing (plan/topology.h): an axis is halved while it keeps >= 8 voxels and its spacing
//     is within 2x of the finest, kernels (1, 3, 3)-style until an axis's spacing catches up; at
//     most 8 stages; filters 32 -> 320;
//   - batch: as many as fit (at least 2), capped so batch x patch voxels <= 5% of the dataset's
//     voxels (but >= 2);
//   - normalisation per channel: CT-like channels (named ct, any case, or whose 0.5 percentile is
//     below -500) "ct:P0.5:P99.5:MEAN:STD" from the foreground statistics; 0/1 mask channels "none";
//     others "zscore";
//   - a low-resolution plan (nnU-Net's 3d_lowres) when the patch covers less than 1/4 of the median
//     volume: the spacing grows by 3% per round (first the axes finer than half the coarsest) until the
//     patch covers 1/4 of the median volume at that spacing, dropped when that volume is not at least
//     2x smaller; with it, for segmentation, the cascade's second stage (3d_cascade_fullres);
//   - a 2d plan beside it (nnU-Net's ExperimentPlanner, get_plans_for_configuration with the in-plane
//     spacing): slices across data.slice_axis = the axis one voxel deep in the median shape, else the
//     coarsest axis of the target spacing (nnU-Net's transpose_forward puts it first; 0 for isotropic
//     data); the in-plane patch starts at 2048^2 voxels in the spacings' aspect ratio, at most the
//     median in-plane shape (and the smallest case), 1 on the slice axis; the in-plane topology as
//     above (kernels and strides 1 on the slice axis, at most 8 stages), filters 32 -> 512; patch
//     shrinking, batch (as many as fit, at most 5% of the dataset's voxels, at least 2) as above;
//   - the preferred configuration: nnU-Net trains every configuration and picks the best by 5-fold
//     cross-validation (nnunetv2/evaluation/find_best_configuration.py); it plans only 2d for data one
//     slice deep (default_experiment_planner.py, plan_experiment). The plan prefers 2d for data one
//     slice deep and for anisotropic data (coarse spacing > 3x the finest, nnU-Net's ANISO_THRESHOLD),
//     else 3d_fullres, and says so: a hint, the cross-validation decides.
// Memory is counted for bf16 activations (training.precision auto on CUDA) and the recipe's
// optimizer (sgd: 1 state per parameter; adamw: 2), dice_ce's loss tensors for segmentation.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/plan/fingerprint.h"
#include "u3d/plan/memory_model.h"

namespace u3d {

struct PlanOptions {
  std::filesystem::path dataset;
  std::string task = "auto";  // auto (the dataset's) | segmentation | dose
  double gpu_memory_gib = 0;  // 0: the CUDA device's memory (make_plan_measured) or 80 GiB assumed (nnunet: 8)
  // bytes: the step's bytes, estimated (plan/memory_model.h) or measured, within margin x the budget;
  // nnunet: nnU-Net's own memory model (plan/nnunet_vram.h) and batch rule, which give nnU-Net's plan.
  std::string memory_model = "bytes";
  // The dataset's recorded normalisation (DatasetInfo::channel_normalization, one per channel, the
  // importer's statistics of the native-resolution images): the plan keeps it unless `renormalize`.
  std::vector<std::string> recorded_normalize;
  bool renormalize = false;
  bool measure_on_cuda = false;
  double margin = 0.85;  // share of the budget one training step may take
  int64_t threads = 0;   // fingerprint threads; 0: every core
};

struct Plan {
  std::string configuration = "3d_fullres";  // or "3d_lowres", "3d_cascade_fullres", "2d"
  Task task = Task::kSegmentation;
  std::array<double, 3> target_spacing{};  // mm, (D, H, W)
  Shape3 median_shape{};                   // voxels: as stored (3d_fullres), at target_spacing (3d_lowres)
  bool anisotropic = false;
  int64_t lowres_axis = -1;  // the anisotropic axis, else -1
  Shape3 patch{};
  int64_t batch = 2;
  int64_t levels = 4;
  std::vector<Shape3> strides, kernels;  // model.strides and model.kernel_sizes, one per level (plan/topology.h)
  int64_t base_filters = 32, max_filters = 320;
  int64_t in_channels = 1, out_channels = 1;
  std::vector<std::string> normalize;  // data.normalize, one per channel
  int64_t step_bytes = 0;              // estimated (or measured) peak of one step
  bool measured = false;               // step_bytes from measure_step_bytes_cuda
  std::string memory_model = "bytes";  // PlanOptions::memory_model; nnunet: step_bytes 0 (a count, not bytes)
  int64_t budget_bytes = 0;
  bool budget_assumed = false;  // 80 GiB assumed (no --gpu-memory, no device)
  double margin = 0.85;
  bool resample_needed = false;                // the cases are not all at target_spacing: re-import with --spacing
  std::map<std::string, std::string> reasons;  // config key (or "spacing", "lowres") -> why
  bool lowres = false;                         // this is the low-resolution plan
  std::shared_ptr<const Plan> lowres_plan;     // the 3d_lowres plan of a full-resolution plan, or null
  // nnU-Net's 3d_cascade_fullres beside a 3d_lowres (segmentation): the full-resolution plan with one
  // more input channel per foreground class (the first stage's segmentation, predict/cascade_data.h).
  std::shared_ptr<const Plan> cascade_plan;
  // 2D (nnU-Net's 2d configuration): model.dims 2 across data.slice_axis, patch 1 on that axis.
  int64_t dims = 3;
  int64_t slice_axis = -1;               // the 2d plan's data.slice_axis, else -1
  std::shared_ptr<const Plan> plan_2d;   // the 2d plan of a full-resolution plan, or null
  std::string preferred = "3d_fullres";  // which configuration the rule prefers (make_plan's comment), and why
  std::string preferred_reason;
};

// The plan from the memory model alone. ConfigError for an unknown task, a task the dataset does
// not hold, or a budget that not even the smallest patch fits.
Plan make_plan(const DatasetFingerprint& fp, const PlanOptions& options);
// The same, each candidate measured with measure_step_bytes_cuda(steps, ...) instead of estimated
// (the estimate still orders the search); `steps`: training's real step (run_training_steps,
// train/step_probe.h). CudaError without a CUDA device.
Plan make_plan_measured(const DatasetFingerprint& fp, const PlanOptions& options, const TrainingSteps& steps);

// The commented YAML experiment: a header (how it was made, fingerprint_table()), then every chosen
// value with a `# reason` comment. Only keys of docs/config.md; training.device auto; data.val_split
// "val" when the dataset has that split, else "" (no validation). A low-resolution plan's YAML says
// which `trainer import ... --spacing` makes its dataset, and points data.path at it.
std::string plan_yaml(const Plan& plan, const DatasetFingerprint& fp, const std::string& data_path,
                      const std::string& experiment_name);

}  // namespace u3d
