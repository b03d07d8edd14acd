// Whole-volume prediction: sliding windows with Gaussian importance weighting, the one prediction
// loop: validation during training (train/validator.h), `trainer --predict-only` and ensembles
// (prediction_run.h; an EnsembleNetwork runs through it as one network) all call it.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/preprocess.h"
#include "u3d/model/unet.h"

namespace u3d {

// Window origins along one axis: first at 0, last at size - patch, step at most
// patch * (1 - overlap). A size below the patch gives {0} (the volume is padded).
std::vector<int64_t> window_starts(int64_t size, int64_t patch, double overlap);
// (d, h, w) float32 Gaussian centred on the patch, sigma = patch * sigma_fraction per axis,
// scaled to max 1 and clamped away from 0 so border voxels still count.
torch::Tensor gaussian_importance_map(const Shape3& patch, double sigma_fraction = 0.125);

struct SlidingWindowOptions {
  Shape3 patch = {64, 64, 64};
  double overlap = 0.5;
  int64_t batch_size = 2;  // windows per forward pass
  bool gaussian = true;
  // Test-time augmentation: each window is also predicted mirrored along every combination of the
  // three spatial axes (8 inputs per window, in the same forward pass); the outputs are mirrored
  // back and averaged.
  bool mirror = false;
  // Forward passes under autocast in this dtype (bf16/fp16, as training: inference_autocast());
  // std::nullopt: fp32. The blended output, the sink's slabs and every metric stay float32.
  std::optional<at::ScalarType> autocast;
  // Windows in ChannelsLast3d (the network's layout, set_layout()).
  bool channels_last = false;
  // Polled before each batch of windows (a host-side check, no device sync): when it returns true
  // the prediction ends with a StoppedError (validation answers Ctrl-C inside a large case).
  std::function<bool()> stop;
  // A sigmoid head (model.head): each window's output goes through a sigmoid before the mirrorings'
  // mean and the blending, so probabilities are averaged; the slabs are the logits of the blended
  // probabilities (clamped to [1e-6, 1 - 1e-6]), so every consumer still reads logits.
  bool sigmoid = false;
};

// The windows of a prediction as the config sets them, shared by validation (train/validator.h) and
// prediction (resolve_prediction.h): predict.overlap, predict.batch_size (data.batch_size when 0),
// predict.gaussian, forward passes under the training step's autocast (inference_autocast of
// cfg.training on `device`), sigmoid from cfg.model.head; `patch`: the network's training patch;
// `mirror`: predict.tta flips.
SlidingWindowOptions window_options(const Config& cfg, const Shape3& patch, const torch::Device& device,
                                    bool channels_last, bool mirror);

// The mirrorings used by SlidingWindowOptions::mirror for windows of `window` voxels: every subset of
// the spatial dims {2, 3, 4} of an (N, C, D, H, W) tensor, the empty one (identity) first, leaving out
// those that flip a 1-voxel axis (a slice window of a 2D network: 4 mirrorings, the same mean as 8).
std::vector<std::vector<int64_t>> mirror_combinations(const Shape3& window);

// Receives a volume's blended network output slab by slab along D, in order: consecutive calls
// cover [0, D) exactly once.
class SlabSink {
 public:
  virtual ~SlabSink() = default;
  // slab: (K, d, H, W) float32 on the prediction device, rows [d0, d0 + d) of the output.
  virtual void consume(int64_t d0, const torch::Tensor& slab) = 0;
};

// Streaming sliding-window prediction: windows run in D-major order and are accumulated (weighted)
// into a rolling buffer of (K, extent, H, W) on `device`, where extent is the D span of the windows
// of one batch: the patch depth, since batches do not cross to the next D start when it has at
// least a batch of windows; rows no later window touches are normalised and handed to `sink` at
// once. Memory beyond the input is therefore O(K * patch depth * H * W), not O(K * D * H * W): a
// 512x512x300 CT never needs its full logits in memory. Runs in eval mode without gradients;
// restores the module's training flag afterwards.
void sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& options,
                            const torch::Device& device, SlabSink& sink);

// Network output (K, D, H, W) float32 for a normalised image (C, D, H, W), on `device` (the
// streaming version with the slabs concatenated).
torch::Tensor sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& options,
                                     const torch::Device& device);

// Turns a network output into the task's prediction: regression (D, H, W) float32 in target
// units; segmentation (D, H, W) uint8 labels (argmax).
torch::Tensor finalize_prediction(const torch::Tensor& network_output, const Preprocessor& pre);

}  // namespace u3d
