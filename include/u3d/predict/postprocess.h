// Post-processing of segmentation predictions (predict.threshold, predict.min_component_size):
// what turns the network output of a case into its labels before they are written and scored.
//
// threshold:           2 classes only: label 1 where the softmax probability of class 1 is >= the
//                      threshold, else 0 (instead of the argmax, which is threshold 0.5 up to ties).
//                      0: off (argmax).
// min_component_size:  connected components (26-connectivity, evaluate/surface_metrics.h's
//                      label_components) of each foreground class with fewer voxels than this are set
//                      to background (0). 0: off. Needs the whole label volume of a case.
// Both off: the labels are the argmax, bit for bit.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "u3d/core/config.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

struct PostprocessOptions {
  double threshold = 0.0;          // predict.threshold; 0: argmax
  int64_t min_component_size = 0;  // predict.min_component_size (voxels); 0: keep every component
  Head head = Head::kSoftmax;      // model.head of the network whose output is labelled
  // Component removal needs the whole label volume (not slab by slab).
  bool needs_whole_volume() const { return min_component_size > 1; }
};

// ConfigError (naming the key) when the options do not fit the model: a threshold with other than 2
// classes (num_classes, background included) and a softmax head, or either option set for a
// regression task. (Their
// ranges are the option table's checks.)
void check_postprocess(const PostprocessOptions& options, Task task, int64_t num_classes);

// Network output (K, ...) float (logits, or log-probabilities: the softmax is the same) -> labels
// (...) uint8 on the output's device: argmax over K, or with threshold > 0 (K == 2) class 1 where
// softmax(output)[1] >= threshold.
torch::Tensor labels_from_output(const torch::Tensor& output, double threshold);
// The same for either head, channels on `dim` of `output`. Softmax head: as above. Sigmoid head
// (K - 1 channels of logits, channel k - 1 = label k): label k where sigmoid(channel k - 1) >=
// options.threshold (0: 0.5); where several channels pass, the one with the highest probability
// (the lower label on a tie); where none passes, 0.
torch::Tensor labels_from_output(const torch::Tensor& output, const PostprocessOptions& options, int64_t dim = 0);
// options.threshold as labels_from_output applies it: a sigmoid head's 0 is 0.5.
double effective_threshold(const PostprocessOptions& options);

// Labels (D, H, W) uint8 -> the same with every 26-connected component of each foreground class
// smaller than min_size voxels set to 0; on the input's device (computed on the CPU). min_size <= 1:
// the labels unchanged.
torch::Tensor remove_small_components(const torch::Tensor& labels, int64_t min_size);

}  // namespace u3d
