// The experiment configuration: one typed struct, built and validated in one place.
//
//   Config cfg = load_config("exp.yaml", {"training.epochs=3"});
//
// Order: defaults, then the YAML file, then `--set key.path=value` overrides, then validate().
// Every key lives in one option table (src/core/config_options.cpp) that gives its type, default, allowed values and
// documentation; parsing, overrides, printing, the YAML dump written to <run>/config.yaml and the
// reference in docs/config.md (`trainer config-reference`) all come from that table.
// Errors are ConfigError with one line: "<file>:<line>:<col>: <key>: <what is wrong>; <allowed>".
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace u3d {

using Shape3 = std::array<int64_t, 3>;  // (D, H, W) in voxels
using Shape2 = std::array<int64_t, 2>;  // two of those axes, e.g. (H, W) in a slice

enum class Device { kAuto, kCpu, kCuda };
enum class Norm { kBatch, kInstance, kGroup, kNone };
enum class Activation { kRelu, kLeakyRelu, kGelu, kElu };
enum class Architecture { kUNet, kResEncUNet, kOpenKbpBaseline, kMlperfUNet3d };
enum class ModelPreset { kNone, kResEncM, kResEncL, kResEncXL, kMlperfUNet3d, kUNet2d };
enum class Checkpointing { kOff, kEncoder, kAll };
enum class OutputActivation { kNone, kRelu, kSigmoid };
enum class OptimizerKind { kAdam, kAdamW, kSgd };
enum class ScheduleKind { kConstant, kCosine, kPoly };
enum class LossKind { kAuto, kL1, kMaskedL1, kMse, kMaskedMse, kDiceCe, kCe, kBce };
// model.head (segmentation): softmax over K channels, or K - 1 independent sigmoids (core/output_head.h)
enum class Head { kSoftmax, kSigmoid };
enum class Monitor { kAuto, kValLoss, kValMetric, kValDoseScore, kValDvhScore, kPseudoDice, kPseudoDiceEma };
enum class CachePlacement { kAuto, kGpu, kPinned, kMemory };
enum class Tta { kNone, kFlips };
enum class SaveErrorPolicy { kStop, kContinue };
enum class Precision { kAuto, kFp32, kBf16, kFp16 };
enum class Toggle { kAuto, kOn, kOff };
enum class DistBackend { kAuto, kNccl, kGloo };
// logging.progress: auto = bar on a terminal, lines otherwise
enum class ProgressMode { kAuto, kBar, kLines, kOff };

struct ExperimentConfig {
  std::string name = "experiment";  // run folder name: <output_dir>/<name>
  std::string output_dir = "runs";
  int64_t seed = 42;  // model init, sampler streams, dropout
  std::string description;
  // Cross-validation (data/folds.h): "" (none), a fold number 0 .. data.folds - 1 (the run folder
  // becomes <output_dir>/<name>/fold_K), or "all" (`trainer --fold all`: every fold in turn).
  std::string fold;
};

struct DataConfig {
  std::string path;  // dataset file (format v1, docs/dataset-format.md); relative to the working folder
  std::string train_split = "train";
  std::string val_split = "val";
  // k-fold cross-validation over train_split + val_split (data/folds.h); 0: off, else >= 2
  int64_t folds = 0;
  std::vector<std::string> channels;  // input channels by name; empty: all channels in file order
  std::vector<std::string> normalize = {
      "zscore"};              // per channel (one entry applies to all): none|zscore|clip:LO:HI|scale:S
  double target_scale = 1.0;  // regression targets are divided by this for training (e.g. 70 Gy)
  int64_t batch_size = 2;
  Shape3 patch_size = {64, 64, 64};  // (D, H, W) voxels; a single number means a cube
  int64_t slice_axis = 0;            // model.dims 2: slices across this axis (0 D axial, 1 H, 2 W); patch 1 there
  double foreground_fraction = 0.0;  // share of patches centred on a foreground voxel (nnU-Net: 0.33)
  std::string foreground = "auto";   // auto | target | mask | channel:NAME | labels:L1,L2,...
  // Structure-mask channels whose OpenKBP DVH metrics are scored during validation (dose tasks):
  // [auto] = the OpenKBP structure names among the dataset's channels; [] = none; or channel names.
  std::vector<std::string> dvh_structures = {"auto"};
  bool preflight = true;  // read and check every train/val case in full before training
  // Training cache (data/cache.h) and sampler threads (data/loader.h).
  CachePlacement cache = CachePlacement::kAuto;  // auto: gpu when it fits in gpu_cache_share of free GPU memory, else
                                                 // pinned (memory on CPU)
  double gpu_cache_share = 0.5;                  // share of free GPU memory the gpu cache may take (auto)
  bool cache_float16 = false;  // keep non-integer image channels and regression targets as float16 (lossy)
  int64_t workers = 0;         // sampler threads; 0: cores - 1 (at least 1)
  int64_t prefetch = 0;        // batches made ahead of the training loop (ready or in the making); 0: 2 x workers
  double pad_value = 0.0;      // image value (normalised units) where an augmented patch reaches past the volume
};

// Training-patch augmentation; each transform has a probability (per sample) and a range. Spatial
// transforms act on image, target and mask together; intensity transforms on image channels only.
struct AugmentConfig {
  double flip_prob = 0.5;                              // probability of mirroring, drawn per sample and per axis
  std::vector<int64_t> flip_axes = {0, 1, 2};          // spatial axes that may be mirrored (0 D, 1 H, 2 W)
  double rot90_prob = 0.0;                             // probability of a rotation by 90, 180 or 270 degrees
  std::vector<int64_t> rot90_plane = {1, 2};           // the two spatial axes of the rotation plane
  double affine_prob = 0.0;                            // probability of a random rotation and scaling
  std::vector<double> affine_rotation = {30, 30, 30};  // max degrees about the D, H, W axes (uniform in [-a, a])
  std::vector<double> affine_scale = {0.7, 1.4};       // zoom factor range (isotropic; > 1 magnifies)
  double elastic_prob = 0.0;                           // probability of a smooth random elastic deformation
  double elastic_magnitude = 4.0;                      // max displacement in voxels (each axis, uniform)
  int64_t elastic_grid = 4;                            // control points per axis of the coarse displacement grid
  double intensity_prob = 0.0;                         // probability of x * scale + shift
  std::vector<double> intensity_scale = {0.9, 1.1};
  std::vector<double> intensity_shift = {-0.1, 0.1};  // normalised units
  double gamma_prob = 0.0;                            // probability of a gamma curve on the patch's [min, max]
  std::vector<double> gamma_range = {0.7, 1.5};
  double noise_prob = 0.0;                      // probability of additive Gaussian noise
  std::vector<double> noise_std = {0.0, 0.1};   // standard deviation range, normalised units
  std::vector<std::string> intensity_channels;  // channels intensity, gamma and noise touch; empty: all
};

struct ModelConfig {
  // resenc_m|l|xl: nnU-Net's residual-encoder U-Net (include/u3d/model/unet.h); mlperf_unet3d: the
  // MLPerf 3D U-Net (include/u3d/model/mlperf_unet3d.h); for every model key the config does not
  // set; applied by load_config before validate().
  ModelPreset preset = ModelPreset::kNone;
  Architecture architecture = Architecture::kUNet;
  // 3: a 3D U-Net; 2 (unet, resenc_unet): a 2D U-Net on slices (Conv2d), whose inputs are still
  // (N, C, D, H, W) with size 1 on the slice axis (core/stage_geometry.h: resolve_slices)
  int64_t dims = 3;
  int64_t slice_axis = 0;  // with dims 2: the axis the network squeezes; load_config copies data.slice_axis
  int64_t levels = 4;      // resolution stages; patch dims must divide by the strides' product (core/stage_geometry.h)
  int64_t base_filters = 16;    // filters at full resolution, doubling per level
  int64_t max_filters = 320;    // cap on filters per level
  int64_t convs_per_level = 2;  // unet: per encoder and decoder stage; resenc_unet: per decoder stage
  // resenc_unet: residual blocks per encoder level; empty: nnU-Net's 1, 3, 4, 6, 6, 6, 6, 6
  std::vector<int64_t> blocks_per_level;
  int64_t kernel_size = 3;
  // unet, resenc_unet: per stage (levels entries) and axis (D, H, W), nnU-Net's conv_kernel_sizes and
  // pool_op_kernel_sizes; empty: kernel_size on every axis, and stride 1 at stage 0 then 2 (today's net)
  std::vector<Shape3> kernel_sizes;
  std::vector<Shape3> strides;
  Norm norm = Norm::kInstance;
  int64_t norm_groups = 8;  // for norm: group
  Activation activation = Activation::kLeakyRelu;
  double negative_slope = 0.01;                                  // for leaky_relu
  double dropout = 0.0;                                          // channel dropout after each convolution
  OutputActivation output_activation = OutputActivation::kNone;  // regression head only
  bool deep_supervision = false;  // segmentation: outputs at every decoder stage (nnU-Net)
  // segmentation: softmax (K channels, one per class) | sigmoid (K - 1 channels, channel k - 1 = label k)
  Head head = Head::kSoftmax;
  Toggle channels_last = Toggle::kAuto;  // weights and activations in ChannelsLast3d; auto: on with CUDA
  // The norm + activation layers through the project's CUDA kernels (model/fused_kernels.h); auto: on
  // for CUDA GPUs whose architecture passed their equality tests (none yet), off on CPU
  Toggle fused_kernels = Toggle::kAuto;
  // Keep each block's input only and recompute the block in the backward pass (model/checkpointing.h)
  Checkpointing activation_checkpointing = Checkpointing::kOff;
};

// One weighted term of a composite loss (training.loss as a list, train/losses.h). Names:
// segmentation ce, dice, cldice, skeleton_recall, boundary; regression l1, masked_l1, mse, masked_mse.
struct LossTerm {
  std::string name;
  double weight = 1.0;
  bool operator==(const LossTerm& o) const { return name == o.name && weight == o.weight; }
};
// training.loss: one named loss (auto, l1, ..., dice_ce, ce), or a list of weighted terms whose
// weighted sum is the loss; each term's mean is a metrics.csv column (loss_<name>).
struct LossSpec {
  LossKind kind = LossKind::kAuto;  // the named form (unused when `terms` is not empty)
  std::vector<LossTerm> terms;      // the list form
  LossSpec() = default;
  LossSpec(LossKind k) : kind(k) {}  // NOLINT(google-explicit-constructor): `loss = LossKind::kL1`
  bool is_list() const { return !terms.empty(); }
  bool operator==(LossKind k) const { return !is_list() && kind == k; }
  bool operator!=(LossKind k) const { return !(*this == k); }
};

struct TrainingConfig {
  Device device = Device::kAuto;
  int64_t threads = 0;  // intra-op CPU threads; 0: cores - 1
  int64_t epochs = 10;
  int64_t steps_per_epoch = 0;  // 0: ceil(training cases / batch size)
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double min_lr = 0.0;  // floor of the cosine schedule
  double weight_decay = 1e-4;
  std::vector<double> betas = {0.9, 0.999};  // adam, adamw
  double momentum = 0.99;                    // sgd
  bool nesterov = true;                      // sgd
  ScheduleKind lr_schedule = ScheduleKind::kCosine;
  int64_t warmup_steps = 0;  // linear warm-up from 0
  double poly_power = 0.9;
  LossSpec loss = LossKind::kAuto;    // auto: masked_l1 (regression with a loss mask), l1, or dice_ce
  std::vector<double> class_weights;  // segmentation ce term: weight per class (empty: all 1)
  int64_t skeleton_iterations = 3;  // cldice, skeleton_recall: soft-skeleton iterations (~ half the thickest structure)
  int64_t boundary_distance = 8;    // boundary: distances truncated at this many voxels
  bool cache_truth_maps = true;     // skeleton_recall, boundary: per-case maps in the cache (data/truth_maps.h)
  double grad_clip_norm = 0.0;      // 0: off
  int64_t val_every = 1;            // validate every N epochs (and after the last)
  bool val_full = true;             // sliding-window validation on whole val volumes
  int64_t val_patch_batches = 0;    // nnU-Net pseudo-Dice on val patches every epoch; 0: off
  double pseudo_dice_ema = 0.9;     // ema = w * ema + (1 - w) * pseudo_dice
  bool deterministic = false;       // deterministic algorithms, no TF32
  int64_t max_nonfinite_steps = 20;  // consecutive steps skipped for NaN/Inf before the run stops
  // Training step (train/train_step.h, docs/performance.md)
  Precision precision = Precision::kAuto;  // auto: CUDA fp16 (batch norm) or bf16, CPU fp32; fp16 adds loss scaling
  Toggle cuda_graph = Toggle::kAuto;       // capture the whole step in a CUDA graph; auto: when it can
  int64_t graph_warmup_steps = 3;          // eager steps on a side stream before the capture
  // Micro-batches of data.batch_size per optimizer step (gradient accumulation): the optimizer sees
  // batch_size x accumulate_steps samples per step; steps, schedule and checkpoints count optimizer steps.
  int64_t accumulate_steps = 1;
  // Several processes (torchrun, srun; train/distributed.h): the c10d backend (auto: NCCL on CUDA,
  // Gloo on CPU) and how long a collective waits for the other ranks before the run stops.
  DistBackend dist_backend = DistBackend::kAuto;
  double dist_timeout_s = 600.0;
  // Stopping rules (train/trainer.h): a wall-clock budget of the whole run, in minutes (every
  // process, start-up and validation included; 0: none), and epochs without an improvement of the
  // monitored value before the run stops (0: never). Both stop after an epoch, with a checkpoint.
  double max_minutes = 0.0;
  int64_t early_stop_patience = 0;
};

struct CheckpointConfig {
  int64_t every_epochs = 1;
  int64_t keep_last = 2;             // newest periodic checkpoints kept (>= 2); best.pt is kept apart
  Monitor monitor = Monitor::kAuto;  // what "best" means; auto: val_dose_score when scored, else the task metric
  double every_minutes = 0.0;        // also checkpoint inside an epoch this often (wall clock); 0: off
  SaveErrorPolicy on_error = SaveErrorPolicy::kStop;  // a checkpoint that cannot be written: stop | continue
};

struct PredictConfig {
  std::string split = "val";   // split written by --predict-only
  double overlap = 0.5;        // sliding-window overlap as a fraction of the patch
  int64_t batch_size = 0;      // windows per forward pass; 0: data.batch_size
  bool gaussian = true;        // Gaussian importance weighting of windows (sigma = patch / 8)
  Tta tta = Tta::kNone;        // flips: average over all 8 mirrorings, batched into one pass
  bool nifti = true;           // <split>/<case>.nii.gz for cases imported from NIfTI
  bool probabilities = false;  // segmentation: softmax (K, D, H, W) into <split>.h5
  // Post-processing of segmentation labels (predict/postprocess.h). threshold: softmax head with 2 classes,
  // label 1 where p(class 1) >= threshold, 0: argmax; sigmoid head: label k where p(channel k - 1) >=
  // threshold, 0: 0.5; min_component_size: smaller 26-connected components -> 0, 0: off.
  double threshold = 0.0;
  int64_t min_component_size = 0;
};

struct LoggingConfig {
  std::string level = "info";                   // trace|debug|info|warn|error
  ProgressMode progress = ProgressMode::kAuto;  // a redrawn status line on a terminal, else plain lines
  double progress_seconds = 30.0;  // lines mode: a progress line inside an epoch at most this often; 0: none
  bool step_log = false;           // <run>/steps.csv: every step's loss (debugging; reads the loss each step)
  bool plot = true;                // <run>/progress.png and .svg after every epoch (monitor/progress_plot.h)
  bool tensorboard = false;        // <run>/tensorboard/events.out.tfevents.* (monitor/tensorboard.h)
  int64_t tensorboard_steps = 50;  // with tensorboard: train loss and lr every this many steps; 0: per epoch only
};

struct Config {
  ExperimentConfig experiment;
  DataConfig data;
  AugmentConfig augment;
  ModelConfig model;
  TrainingConfig training;
  CheckpointConfig checkpoint;
  PredictConfig predict;
  LoggingConfig logging;

  // Not options: where the config came from, and where each key was set ("exp.yaml:12:3" or
  // "--set data.batch_size=4"), so cross-field errors can point at the line.
  std::string source;
  std::map<std::string, std::string> origin;
};

// Where `key` was set ("exp.yaml:12:3", "--set data.batch_size=4"); a key left at its default:
// "<source> (default)", or "config" without a source. Every message about a key starts with it.
std::string key_origin(const Config& cfg, const std::string& key);

// experiment.fold as a number; std::nullopt when it is "" or "all".
std::optional<int64_t> fold_number(const Config& cfg);

// Defaults, then `path`, then `overrides` ("key.path=value", value in YAML syntax), then validate().
Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
// Same from YAML text (tests, checkpoints); `source` names it in messages.
Config load_config_from_string(const std::string& yaml, const std::string& source,
                               const std::vector<std::string>& overrides = {});
// Applies one "key.path=value" override.
void apply_override(Config& cfg, const std::string& assignment);
// Cross-field checks that need no dataset; ConfigError on the first problem.
void validate(const Config& cfg);

// Complete YAML (every key) that load_config_from_string reads back into an equal Config.
std::string to_yaml(const Config& cfg);
// Two-column table of every key and its value, for the start-up banner.
std::string describe(const Config& cfg);
// The value of one key as printed in to_yaml ("[64, 64, 64]"); ConfigError for unknown keys.
std::string get_value(const Config& cfg, const std::string& key);
// Keys whose values differ: "key: a -> b".
std::vector<std::string> diff(const Config& a, const Config& b);
// Markdown reference of every key (docs/config.md).
std::string reference_markdown();

// Names of enum values as they appear in YAML.
std::string to_string(Device v);
std::string to_string(Norm v);
std::string to_string(Activation v);
std::string to_string(Architecture v);
std::string to_string(ModelPreset v);
std::string to_string(Checkpointing v);
std::string to_string(OutputActivation v);
std::string to_string(OptimizerKind v);
std::string to_string(ScheduleKind v);
std::string to_string(LossKind v);
std::string to_string(Head v);
std::string to_string(Monitor v);
std::string to_string(CachePlacement v);
std::string to_string(Tta v);
std::string to_string(SaveErrorPolicy v);
std::string to_string(Precision v);
std::string to_string(Toggle v);
std::string to_string(DistBackend v);
std::string to_string(ProgressMode v);

}  // namespace u3d
