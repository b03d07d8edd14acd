// The option table and its value checks. To add a key: add the field to the struct in
// include/u3d/core/config.h and one U3D_KEY(section, field, doc[, check]) row to option_table() below.
#include "config_options.h"

#include <algorithm>

#include "config_codec.h"
#include "u3d/core/normalize_spec.h"
#include "u3d/core/text.h"

namespace u3d::config_detail {
namespace {

// ---------------------------------------------------------------------------------------------
// Value checks: return "" when fine, else what is allowed.
template <class T>
using Check = std::function<std::string(const T&)>;

template <class T>
Check<T> at_least(T lo) {
  return [lo](const T& v) { return v >= lo ? "" : fmt::format("must be >= {}", lo); };
}
template <class T>
Check<T> in_range(T lo, T hi) {
  return [lo, hi](const T& v) { return (v >= lo && v <= hi) ? "" : fmt::format("must be in [{}, {}]", lo, hi); };
}
Check<double> positive() {
  return [](const double& v) { return v > 0 ? "" : std::string("must be > 0"); };
}
Check<double> in_unit_open(double hi_excl) {
  return
      [hi_excl](const double& v) { return (v >= 0 && v < hi_excl) ? "" : fmt::format("must be in [0, {})", hi_excl); };
}
Check<std::string> file_name_safe() {
  return [](const std::string& v) {
    if (v.empty()) return std::string("must not be empty");
    for (char c : v) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
        return std::string("may hold only letters, digits, '_', '-' and '.'");
      }
    }
    if (v == "." || v == "..") return std::string("must name a folder");
    return std::string();
  };
}
Check<std::string> one_of(std::vector<std::string> allowed) {
  return [allowed](const std::string& v) {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return std::string();
    return fmt::format("expected one of {}", fmt::join(allowed, "|"));
  };
}
Check<Shape3> shape_at_least(int64_t lo) {
  return [lo](const Shape3& v) {
    for (auto x : v) {
      if (x < lo) return fmt::format("every size must be >= {}", lo);
    }
    return std::string();
  };
}
// A list of `count` values (any number when 0), each accepted by `ok`.
template <class T>
Check<std::vector<T>> each(std::function<bool(T)> ok, std::string problem, size_t count = 0,
                           std::string count_problem = "") {
  return [=](const std::vector<T>& v) {
    if (count > 0 && v.size() != count) return count_problem;
    return std::all_of(v.begin(), v.end(), ok) ? std::string() : problem;
  };
}

// [lo, hi] with lo <= hi, both within [min, max].
Check<std::vector<double>> range_check(double min, double max) {
  return [min, max](const std::vector<double>& v) {
    if (v.size() != 2 || v[0] > v[1]) return std::string("expected [low, high] with low <= high");
    if (v[0] < min || v[1] > max) return fmt::format("both ends must be in [{}, {}]", min, max);
    return std::string();
  };
}
// Spatial axes 0 (D), 1 (H), 2 (W), each at most once; `count` of them, or any number when 0.
Check<std::vector<int64_t>> axes_check(size_t count) {
  return [count](const std::vector<int64_t>& v) {
    if (count > 0 && v.size() != count) return fmt::format("expected {} distinct axes out of 0, 1, 2", count);
    std::set<int64_t> seen;
    for (int64_t a : v) {
      if (a < 0 || a > 2 || !seen.insert(a).second) return std::string("axes are distinct values out of 0, 1, 2");
    }
    return std::string();
  };
}

// One normalisation spec (preprocess.h), or "dataset" (the importer's choice, resolved at load).
std::string check_norm_spec(const std::string& spec) {
  return spec == "dataset" ? std::string() : channel_norm_problem(spec);
}

// data.foreground: auto | target | mask | channel:NAME | labels:L1,L2,...
std::string check_foreground_spec(const std::string& spec) {
  if (spec == "auto" || spec == "target" || spec == "mask") return "";
  if (spec.rfind("channel:", 0) == 0 && spec.size() > 8) return "";
  if (spec.rfind("labels:", 0) == 0 && spec.size() > 7) {
    const auto labels = parse_int_list(spec.substr(7));
    if (!labels || std::any_of(labels->begin(), labels->end(), [](int64_t v) { return v < 1; })) {
      return fmt::format("'{}': labels must be integers >= 1", spec);
    }
    return "";
  }
  return fmt::format("'{}' is not one of auto|target|mask|channel:NAME|labels:L1,L2,...", spec);
}

template <class S, class T>
Option make_option(std::string key, S Config::*section, T S::*field, std::string doc, Check<T> check = nullptr) {
  Option o;
  o.key = key;
  o.type = Codec<T>::type();
  o.doc = std::move(doc);
  o.set = [key, section, field, check](Config& c, const YAML::Node& n, const std::string& where) {
    T v = Codec<T>::parse(n, where, key);
    if (check) {
      const std::string problem = check(v);
      if (!problem.empty()) fail(where, key, fmt::format("{} is not allowed; {}", Codec<T>::format(v), problem));
    }
    (c.*section).*field = std::move(v);
    c.origin[key] = where;
  };
  o.get = [section, field](const Config& c) { return Codec<T>::format((c.*section).*field); };
  return o;
}

// One row of option_table(): section and field name the key ("data.patch_size") and the member.
#define U3D_KEY(section, field, ...) \
  make_option(#section "." #field, &Config::section, &decltype(Config::section)::field, __VA_ARGS__)

}  // namespace

const std::vector<Option>& option_table() {
  static const std::vector<Option> table = {
      // experiment
      U3D_KEY(experiment, name, "Run name; the run folder is <output_dir>/<name>", file_name_safe()),
      U3D_KEY(experiment, output_dir, "Folder that holds run folders"),
      U3D_KEY(experiment, seed, "Seed of model initialisation, patch sampling and dropout", at_least<int64_t>(0)),
      U3D_KEY(experiment, description, "Free text kept with the run"),
      U3D_KEY(experiment, fold,
              "Cross-validation fold (with data.folds): \"\" (none), 0 .. data.folds - 1 (run folder "
              "<output_dir>/<name>/fold_K), or all (every fold in turn; also `trainer --fold K|all`)",
              Check<std::string>([](const std::string& v) {
                if (v.empty() || v == "all") return std::string();
                const auto n = parse_int(v);
                return n && *n >= 0 ? std::string() : std::string("expected \"\", a fold number or all");
              })),
      // data
      U3D_KEY(data, path, "Dataset file (HDF5, docs/dataset-format.md), relative to the working folder"),
      U3D_KEY(data, train_split, "Split used for training"),
      U3D_KEY(data, val_split, "Split used for validation; empty: no validation"),
      U3D_KEY(data, folds,
              "k-fold cross-validation over the cases of train_split and val_split (data/folds.h): the "
              "folds are made once from experiment.seed and kept in <output_dir>/<name>/folds.json; 0: off",
              Check<int64_t>([](const int64_t& v) {
                return v == 0 || v >= 2 ? std::string() : std::string("must be 0 (off) or >= 2");
              })),
      U3D_KEY(data, channels, "Input channels by name; empty: every channel in file order"),
      U3D_KEY(data, normalize,
              "Per input channel (one entry: all): none | zscore (per case) | clip:LO:HI (clip, map to "
              "[0, 1]) | scale:S (divide by S) | minmax (per case, to [0, 1]) | ct:LO:HI:MEAN:STD (clip, "
              "then z-score with fixed statistics: nnU-Net's CT scheme) | dataset (what the dataset file "
              "records per channel, e.g. the importer's ct:... statistics; zscore if none)",
              Check<std::vector<std::string>>([](const std::vector<std::string>& v) {
                if (v.empty()) return std::string("needs at least one entry");
                for (const auto& s : v) {
                  const auto p = check_norm_spec(s);
                  if (!p.empty()) return p;
                }
                return std::string();
              })),
      U3D_KEY(data, target_scale,
              "Regression targets are divided by this for training and predictions multiplied back "
              "(e.g. 70 for dose in Gy)",
              positive()),
      U3D_KEY(data, batch_size, "Patches per training step", at_least<int64_t>(1)),
      U3D_KEY(data, patch_size,
              "Training patch (D, H, W) in voxels; each axis must divide by the product of its model.strides "
              "(2^(model.levels - 1) by default)",
              shape_at_least(1)),
      U3D_KEY(data, slice_axis,
              "model.dims 2: the axis slices are taken across (0: D, axial; 1: H; 2: W); data.patch_size is 1 "
              "there (a cube such as 256 becomes [1, 256, 256])",
              in_range<int64_t>(0, 2)),
      U3D_KEY(data, foreground_fraction, "Share of training patches centred on a foreground voxel (nnU-Net uses 0.33)",
              in_range(0.0, 1.0)),
      U3D_KEY(data, foreground,
              "What is foreground: auto (labels > 0, or target > 0 for regression) | target | mask | "
              "channel:NAME (input channel above its minimum) | labels:L1,L2,...",
              Check<std::string>(check_foreground_spec)),
      U3D_KEY(data, preflight,
              "Check every train and validation case in full as it is loaded (as `trainer check-data`); "
              "an error stops the run before it starts"),
      U3D_KEY(data, cache,
              "Where the training split is kept: gpu (whole split in GPU memory, sampling on the GPU), pinned "
              "(page-locked RAM), memory; auto: gpu when it fits in data.gpu_cache_share of free GPU memory, "
              "else pinned (memory when training on CPU)"),
      U3D_KEY(data, gpu_cache_share, "Share of free GPU memory that data.cache: auto may give the cache",
              in_range(0.0, 1.0)),
      U3D_KEY(data, cache_float16,
              "Keep non-integer image channels and regression targets as float16 (halves them; lossy). "
              "Integer channels (CT in HU, masks) are always kept exactly as int16/uint8"),
      U3D_KEY(data, workers,
              "Sampler threads; 0: with training.threads cores - 1 in all (CPU a quarter, CUDA the rest); max 4/core",
              at_least<int64_t>(0)),
      U3D_KEY(data, prefetch,
              "Batches made ahead of the training loop (ready or in the making); at most this many threads "
              "work at once; 0: twice data.workers; at most 1024",
              at_least<int64_t>(0)),
      U3D_KEY(data, pad_value,
              "Image value (normalised units) where an affine-augmented patch reaches past the volume; "
              "targets, labels and masks are padded with 0"),
      U3D_KEY(data, dvh_structures,
              "Structure-mask channels scored with the OpenKBP DVH metrics during validation (dose tasks; "
              "adds val_dose_score and val_dvh_score to metrics.csv): [auto] = the OpenKBP names (Brainstem, "
              "..., PTV70) found among the channels; [] = none; or channel names (PTV* and target:NAME are "
              "targets, others and oar:NAME organs at risk)"),
      // augment
      U3D_KEY(augment, flip_prob, "Probability of mirroring each axis of a training patch", in_range(0.0, 1.0)),
      U3D_KEY(augment, flip_axes, "Spatial axes that may be mirrored (0 D, 1 H, 2 W)", axes_check(0)),
      U3D_KEY(augment, rot90_prob,
              "Probability of rotating a patch by 90, 180 or 270 degrees (equally likely) in rot90_plane",
              in_range(0.0, 1.0)),
      U3D_KEY(augment, rot90_plane, "Two spatial axes spanning the rot90 plane; the patch must be square in them",
              axes_check(2)),
      U3D_KEY(augment, affine_prob,
              "Probability of a random rotation and scaling (trilinear for images and regression targets, "
              "nearest for labels and masks)",
              in_range(0.0, 1.0)),
      U3D_KEY(augment, affine_rotation,
              "Largest rotation in degrees about the D, H and W axes (each drawn uniformly in [-a, a])",
              each<double>([](double a) { return a >= 0 && a <= 180; }, "each angle must be in [0, 180]", 3,
                           "expected three angles [D, H, W] in degrees")),
      U3D_KEY(augment, affine_scale, "Range of the zoom factor [low, high] (isotropic; > 1 magnifies)",
              range_check(0.05, 20.0)),
      U3D_KEY(augment, elastic_prob,
              "Probability of a smooth random elastic deformation (a displacement field on a coarse grid, "
              "upsampled; applied with flips, rotations and scaling in one resampling; labels nearest-neighbour)",
              in_range(0.0, 1.0)),
      U3D_KEY(augment, elastic_magnitude,
              "Largest elastic displacement in voxels (per axis, drawn uniformly in [-m, m] at each control point)",
              in_range(0.0, 64.0)),
      U3D_KEY(augment, elastic_grid,
              "Control points per axis of the elastic displacement grid (2: a global bend; more: finer wrinkles)",
              at_least<int64_t>(2)),
      U3D_KEY(augment, intensity_prob, "Probability of x * scale + shift on the intensity channels",
              in_range(0.0, 1.0)),
      U3D_KEY(augment, intensity_scale, "Range of the multiplicative factor", range_check(0.0, 100.0)),
      U3D_KEY(augment, intensity_shift, "Range of the additive shift (normalised units)", range_check(-1e6, 1e6)),
      U3D_KEY(augment, gamma_prob,
              "Probability of a gamma curve: x mapped to [0, 1] over the patch's range, raised to gamma, "
              "mapped back",
              in_range(0.0, 1.0)),
      U3D_KEY(augment, gamma_range, "Range of gamma", range_check(0.01, 100.0)),
      U3D_KEY(augment, noise_prob, "Probability of additive Gaussian noise", in_range(0.0, 1.0)),
      U3D_KEY(augment, noise_std, "Range of the noise standard deviation (normalised units)", range_check(0.0, 1e6)),
      U3D_KEY(augment, intensity_channels,
              "Input channels that intensity, gamma and noise change (e.g. [ct]); empty: all"),
      // model
      U3D_KEY(model, preset,
              "nnU-Net's residual-encoder U-Net presets (resenc_m, resenc_l, resenc_xl) for every model key the "
              "config leaves unset: architecture resenc_unet, base_filters 32, max_filters 320, kernel 3, "
              "instance norm, leaky_relu 0.01, blocks_per_level 1,3,4,6,6,6,..., one decoder convolution per "
              "stage, levels from the patch (down-sampling while every axis keeps >= 4 voxels, at most 8). The "
              "three share one network, as in nnU-Net; they differ in the GPU memory its planner fills with "
              "patch and batch (M 8 GB, L 24 GB, XL 40 GB; docs/performance.md). mlperf_unet3d: the MLPerf "
              "Training 3D U-Net (KiTS19) with the reference's parameter names: architecture mlperf_unet3d, "
              "levels 6, base_filters 32, max_filters 320, kernel 3, instance norm, relu, two convolutions per "
              "stage, no deep supervision (31.19 M parameters for 1 channel and 3 classes; "
              "configs/mlperf_unet3d.yaml). unet2d: the 2D slice U-Net (configs/slices_2d.yaml): dims 2, levels 5, "
              "filters 32 to 512, kernel 3, batch norm, relu, two convolutions per stage (7.76 M parameters)"),
      U3D_KEY(model, architecture,
              "Network family: unet (plain convolution stages), resenc_unet (nnU-Net's residual-encoder U-Net: "
              "a stem convolution, residual blocks in the encoder, plain decoder), openkbp_baseline (the "
              "OpenKBP challenge's network, f = base_filters; the other model keys do not apply) or "
              "mlperf_unet3d (the MLPerf 3D U-Net, model.preset mlperf_unet3d: levels, filters, kernel, norm and "
              "activation apply; no deep supervision, dropout or activation checkpointing)"),
      U3D_KEY(model, dims,
              "3: a 3D U-Net; 2 (unet, resenc_unet): a 2D U-Net (Conv2d) on slices across data.slice_axis, "
              "batches of (N, C, 1, H, W) patches; kernels and strides are 1 on the slice axis",
              in_range<int64_t>(2, 3)),
      U3D_KEY(model, levels, "Resolution stages of the U-Net", in_range<int64_t>(1, 8)),
      U3D_KEY(model, base_filters, "Filters at full resolution (doubling per level)", at_least<int64_t>(1)),
      U3D_KEY(model, max_filters, "Cap on filters per level", at_least<int64_t>(1)),
      U3D_KEY(model, convs_per_level, "Convolutions per stage (resenc_unet: per decoder stage)",
              in_range<int64_t>(1, 8)),
      U3D_KEY(model, blocks_per_level,
              "resenc_unet: residual blocks per encoder level (at least model.levels entries, each >= 1); "
              "empty: nnU-Net's 1, 3, 4, 6, 6, 6, 6, 6",
              each<int64_t>([](int64_t b) { return b >= 1 && b <= 64; }, "each entry must be in [1, 64]")),
      U3D_KEY(model, kernel_size, "Convolution kernel (odd)", Check<int64_t>([](const int64_t& k) {
                return (k >= 1 && k % 2 == 1 && k <= 7) ? "" : std::string("must be 1, 3, 5 or 7");
              })),
      U3D_KEY(model, kernel_sizes,
              "unet, resenc_unet: convolution kernel per stage and axis, model.levels (D, H, W) triples, odd "
              "(nnU-Net's conv_kernel_sizes, e.g. [[1, 3, 3], [3, 3, 3], ...]); empty: model.kernel_size everywhere"),
      U3D_KEY(model, strides,
              "unet, resenc_unet: down-sampling per stage and axis, model.levels triples of 1 or 2, the first "
              "[1, 1, 1] (nnU-Net's pool_op_kernel_sizes); empty: 2 on every axis after stage 0"),
      U3D_KEY(model, norm, "Normalisation after each convolution"),
      U3D_KEY(model, norm_groups, "Groups for norm: group", at_least<int64_t>(1)),
      U3D_KEY(model, activation, "Non-linearity"),
      U3D_KEY(model, negative_slope, "Slope for leaky_relu", in_range(0.0, 1.0)),
      U3D_KEY(model, dropout, "Channel dropout probability after each convolution", in_unit_open(1.0)),
      U3D_KEY(model, output_activation, "Activation of a regression head (segmentation heads give logits)"),
      U3D_KEY(model, deep_supervision,
              "Deep supervision (segmentation): a 1x1x1 head on every decoder stage, losses weighted 1, "
              "1/2, 1/4, ... from full resolution down, the lowest-resolution one off, normalised to sum 1, "
              "targets down-sampled by nearest neighbour (as nnU-Net)"),
      U3D_KEY(model, head,
              "Segmentation head: softmax (K channels) or sigmoid (K - 1 channels, channel k - 1 = label k, "
              "independent probabilities; losses bce and dice; docs/segmentation.md)"),
      U3D_KEY(model, activation_checkpointing,
              "Trade compute for memory: keep only each block's input in the forward pass and recompute the "
              "block in the backward pass (one more forward: about a third more compute); encoder: the blocks "
              "of the encoder; all: of encoder and decoder. Gradients equal the plain run's; unet and "
              "resenc_unet only"),
      // training
      U3D_KEY(model, channels_last,
              "Weights and activations in channels-last 3D layout (NDHWC) for cuDNN; auto: on with CUDA for "
              "every network (instance and group norm keep the layout, model/channels_last_norm.h), off on CPU"),
      U3D_KEY(model, fused_kernels,
              "Norm + activation, decoder concatenations and the Dice + CE/BCE losses in the project's CUDA "
              "kernels, in training (model/fused_kernels.h); auto: each family on a GPU architecture verified for it "
              "in docs/performance.md (none yet), off on CPU; on: all, needs CUDA and the kernels. Same checkpoints"),
      U3D_KEY(training, device, "auto: CUDA when available, else CPU"),
      U3D_KEY(training, threads, "Intra-op threads; 0: with data.workers cores - 1, 1 each at least; max 4/core",
              at_least<int64_t>(0)),
      U3D_KEY(training, epochs, "Epochs to train", at_least<int64_t>(1)),
      U3D_KEY(training, steps_per_epoch,
              "Optimizer steps per epoch; 0: ceil(training cases / (batch size x accumulate_steps)), with "
              "model.dims 2 ceil(their slices / (batch size x accumulate_steps))",
              at_least<int64_t>(0)),
      U3D_KEY(training, optimizer, "Optimizer"),
      U3D_KEY(training, lr, "Peak learning rate", positive()),
      U3D_KEY(training, min_lr, "Final learning rate of cosine", at_least(0.0)),
      U3D_KEY(training, weight_decay, "Weight decay", at_least(0.0)),
      U3D_KEY(training, betas, "Adam betas [beta1, beta2]",
              each<double>([](double b) { return b >= 0 && b < 1; }, "each beta must be in [0, 1)", 2,
                           "expected two numbers [beta1, beta2]")),
      U3D_KEY(training, momentum, "SGD momentum", in_unit_open(1.0)),
      U3D_KEY(training, nesterov, "SGD Nesterov momentum"),
      U3D_KEY(training, lr_schedule, "Learning-rate decay after warm-up"),
      U3D_KEY(training, warmup_steps, "Linear warm-up steps", at_least<int64_t>(0)),
      U3D_KEY(training, poly_power, "Exponent of poly decay", positive()),
      U3D_KEY(training, loss,
              "auto: masked_l1 (regression with a loss mask), l1 (without), dice_ce (segmentation; [bce, dice] with "
              "model.head sigmoid); or a list of terms summed, a name or {name, weight}, e.g. [ce, dice, {name: "
              "cldice, weight: 0.5}]; segmentation ce, dice, cldice, skeleton_recall, boundary (softmax head), bce "
              "(sigmoid head), dice (either); regression l1, masked_l1, mse, masked_mse. Each term's epoch mean is "
              "a metrics.csv column loss_<name>. The dataset's ignore label is left out of every term"),
      U3D_KEY(training, class_weights,
              "Segmentation cross-entropy (ce, dice_ce): one weight per class, background first; empty: all 1",
              each<double>([](double w) { return w >= 0; }, "every value must be >= 0")),
      U3D_KEY(training, skeleton_iterations,
              "cldice and skeleton_recall: soft-skeleton iterations (min/max pooling); about half the thickest "
              "structure in voxels",
              in_range<int64_t>(1, 512)),
      U3D_KEY(training, boundary_distance,
              "boundary: the ground truth's signed distance is truncated at this many voxels (and divided by "
              "it)",
              at_least<int64_t>(1)),
      U3D_KEY(training, cache_truth_maps,
              "skeleton_recall and boundary: make the ground truth's skeleton and Euclidean signed distance "
              "once per case when the cache loads and crop them with each patch (1 + 2 (K-1) bytes per "
              "voxel more in the cache); false: make them from each batch's labels (soft skeleton, "
              "truncated chessboard distance)"),
      U3D_KEY(training, grad_clip_norm, "Clip the global gradient norm; 0: off", at_least(0.0)),
      U3D_KEY(training, val_every, "Validate every N epochs and after the last", at_least<int64_t>(1)),
      U3D_KEY(training, val_full,
              "Sliding-window validation on the whole val volumes every val_every epochs (val_loss, val_dice "
              "or val_mae)"),
      U3D_KEY(training, val_patch_batches,
              "Segmentation: batches of val patches (foreground-oversampled like training, no augmentation) "
              "for nnU-Net's pseudo-Dice every epoch; 0: off (nnU-Net: 50)",
              at_least<int64_t>(0)),
      U3D_KEY(training, pseudo_dice_ema,
              "Weight of the previous value in the pseudo-Dice EMA: ema = w * ema + (1 - w) * pseudo_dice "
              "(nnU-Net: 0.9)",
              in_unit_open(1.0)),
      U3D_KEY(training, deterministic,
              "Deterministic algorithms only (slower), no TF32; on CUDA sets CUBLAS_WORKSPACE_CONFIG=:4096:8 "
              "unless set, and computes the segmentation cross-entropy without nll_loss2d"),
      U3D_KEY(training, max_nonfinite_steps,
              "Steps in a row whose loss or gradient norm is NaN/Inf (each skipped, weights unchanged) before "
              "the run stops",
              at_least<int64_t>(1)),
      U3D_KEY(training, precision,
              "Autocast precision of forward and loss: auto (fp32 on CPU; on CUDA fp16 with loss scaling for a "
              "batch-norm network, whose batch norm cuDNN cannot run in bf16, bf16 otherwise; the log names the "
              "choice and why), fp32, bf16, or fp16 (CUDA only; dynamic loss scaling kept on the device). Weights "
              "and optimizer stay float32"),
      U3D_KEY(training, cuda_graph,
              "Capture the whole training step in a CUDA graph and replay it; auto: when the device is CUDA "
              "and batch shapes are fixed (else eager, logging why), and eager under data-parallel training; "
              "on: an error where it cannot, and under data-parallel training (NCCL) every rank captures the "
              "step with its all-reduces"),
      U3D_KEY(training, graph_warmup_steps,
              "Eager steps on a side stream before the CUDA-graph capture (cuDNN autotuning, allocations)",
              at_least<int64_t>(1)),
      U3D_KEY(training, accumulate_steps,
              "Gradient accumulation: micro-batches of data.batch_size per optimizer step, each loss divided by "
              "this, so the optimizer sees batch_size x accumulate_steps samples; steps_per_epoch, the LR "
              "schedule, checkpoints and skipped steps count optimizer steps",
              in_range<int64_t>(1, 1024)),
      U3D_KEY(training, dist_backend,
              "Under torchrun or srun (several processes, data-parallel): the c10d backend; auto: nccl on "
              "CUDA, gloo on CPU"),
      U3D_KEY(training, dist_timeout_s,
              "Under torchrun or srun: seconds a collective (gradient all-reduce, barrier, start-up) waits "
              "for the other ranks before this rank stops with a message naming the rank it waited for",
              at_least(1.0)),
      U3D_KEY(training, max_minutes,
              "Time budget of the whole run in minutes (every process since the first start, start-up and "
              "validation included): the run stops cleanly, with a checkpoint, after the epoch whose successor "
              "would overrun it (estimated from the last epoch's wall time), and says so; --resume continues "
              "while budget is left. 0: none",
              at_least(0.0)),
      U3D_KEY(training, early_stop_patience,
              "Stop, with a checkpoint, once the monitored value (checkpoint.monitor) has not improved for this "
              "many epochs that measure it (a whole-volume value every training.val_every epochs; epochs "
              "without validation do not count); counted from the best epoch, so it survives --resume. Needs a "
              "validation split. 0: never",
              at_least<int64_t>(0)),
      // checkpoint
      U3D_KEY(checkpoint, every_epochs, "Write a checkpoint every N epochs (and after the last)", at_least<int64_t>(1)),
      U3D_KEY(checkpoint, keep_last, "Newest periodic checkpoints to keep, at least 2 (best.pt is kept apart)",
              at_least<int64_t>(2)),
      U3D_KEY(checkpoint, monitor,
              "What 'best' means; auto: val_dose_score when dose metrics are scored (data.dvh_structures), "
              "pseudo_dice_ema when training.val_full is false, else the task metric; val_metric: the task "
              "metric (MAE for regression, Dice for segmentation); val_dose_score / val_dvh_score: the OpenKBP "
              "scores (lower is better); pseudo_dice, pseudo_dice_ema: nnU-Net's pseudo-Dice on val patches and "
              "its EMA"),
      U3D_KEY(checkpoint, every_minutes,
              "Also write a checkpoint inside an epoch (epoch_NNNN_step_SSSSSS.pt) when this many minutes of "
              "wall-clock time passed since the last one; 0: off",
              at_least(0.0)),
      U3D_KEY(checkpoint, on_error,
              "A checkpoint that cannot be written (disk full, read-only folder): stop (exit 1) or continue "
              "training and retry at the next checkpoint"),
      // predict
      U3D_KEY(predict, split, "Split written by --predict-only"),
      U3D_KEY(predict, overlap, "Sliding-window overlap as a fraction of the patch", in_unit_open(1.0)),
      U3D_KEY(predict, batch_size, "Windows per forward pass; 0: data.batch_size", at_least<int64_t>(0)),
      U3D_KEY(predict, gaussian, "Gaussian importance weighting of windows (sigma = patch / 8)"),
      U3D_KEY(predict, tta,
              "Test-time augmentation: flips averages all 8 mirrorings (4 in-plane ones for model.dims 2), batched "
              "into one forward pass"),
      U3D_KEY(
          predict, nifti,
          "Also write <split>/<case>.nii.gz (or .nii) for cases imported from NIfTI: the input's header "
          "and grid (resampling undone), streamed slab by slab; <split>/<case>.tif for cases imported from TIFF; "
          "for cases imported from 2D images, <split>/<case>.tif and <split>/<case>/<image stem>_mask.png per slice"),
      U3D_KEY(predict, probabilities,
              "Segmentation: also write softmax probabilities (K, D, H, W) float32 into <split>.h5"),
      U3D_KEY(predict, threshold,
              "Segmentation: softmax head with 2 classes, label 1 where p(class 1) is at least this (0: argmax); "
              "sigmoid head, label k where p(channel k - 1) is at least this (0: 0.5); applied to the written "
              "labels and their scores (a sigmoid head's validation Dice too)",
              in_range(0.0, 1.0)),
      U3D_KEY(predict, min_component_size,
              "Segmentation: connected components (26-connectivity) of each foreground class with fewer voxels "
              "than this are set to background before the labels are written and scored. 0: off",
              at_least<int64_t>(0)),
      // logging
      U3D_KEY(logging, level, "Console and train.log level", one_of({"trace", "debug", "info", "warn", "error"})),
      U3D_KEY(logging, progress,
              "Progress inside an epoch: bar (one status line redrawn a few times a second: step, %, it/s, ETA "
              "of the epoch and the run, loss, lr, data wait, GPU busy share, GPU memory; log lines print above it), "
              "lines (a "
              "plain line every logging.progress_seconds, no escape codes), off, or auto (bar when stderr is a "
              "terminal, else lines)"),
      U3D_KEY(logging, progress_seconds,
              "Lines mode: a progress line inside an epoch at most this often; 0: none. Bar mode: redrawn "
              "every 0.25 s, or this often when shorter",
              at_least(0.0)),
      U3D_KEY(logging, step_log,
              "Write every step's loss to <run>/steps.csv (debugging: reads the loss back each step)"),
      U3D_KEY(logging, plot,
              "Redraw <run>/progress.png and progress.svg after every epoch (losses and the validation metric, "
              "epoch time, data wait and GPU busy share, learning rate); `trainer plot RUN_DIR` draws them from "
              "metrics.csv"),
      U3D_KEY(logging, tensorboard,
              "Write TensorBoard event files into <run>/tensorboard/: every metrics.csv column per epoch, the "
              "train loss and lr every logging.tensorboard_steps, the progress plot and mid-slices of one "
              "validation case"),
      U3D_KEY(logging, tensorboard_steps,
              "With logging.tensorboard: the train loss and lr every this many steps (one host read of the "
              "loss each time); 0: per epoch only",
              at_least<int64_t>(0)),
  };
  return table;
}

#undef U3D_KEY

}  // namespace u3d::config_detail
