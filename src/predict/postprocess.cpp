#include "u3d/predict/postprocess.h"

#include <fmt/format.h>

#include <vector>

#include "u3d/core/errors.h"
#include "u3d/evaluate/surface_metrics.h"

namespace u3d {

void check_postprocess(const PostprocessOptions& o, Task task, int64_t num_classes) {
  if (task != Task::kSegmentation && (o.threshold > 0.0 || o.min_component_size > 0)) {
    throw ConfigError(fmt::format("predict.{} is set but the task is {}; it post-processes segmentation labels only",
                                  o.threshold > 0.0 ? "threshold" : "min_component_size", to_string(task)));
  }
  if (o.threshold > 0.0 && num_classes != 2 && o.head == Head::kSoftmax) {
    throw ConfigError(
        fmt::format("predict.threshold = {}: the model predicts {} classes; a threshold needs 2 (background and one "
                    "foreground class); set it to 0 (argmax)",
                    o.threshold, num_classes));
  }
}

torch::Tensor labels_from_output(const torch::Tensor& output, double threshold) {
  if (threshold <= 0.0) return output.argmax(0).to(torch::kUInt8);
  if (output.size(0) != 2) {
    throw ConfigError(fmt::format("predict.threshold: the output has {} classes, expected 2", output.size(0)));
  }
  return torch::softmax(output.to(torch::kFloat), /*dim=*/0)[1].ge(threshold).to(torch::kUInt8);
}

double effective_threshold(const PostprocessOptions& o) {
  return o.head == Head::kSigmoid && o.threshold <= 0.0 ? 0.5 : o.threshold;
}

torch::Tensor labels_from_output(const torch::Tensor& output, const PostprocessOptions& o, int64_t dim) {
  if (o.head == Head::kSoftmax) {
    if (o.threshold <= 0.0) return output.argmax(dim).to(torch::kUInt8);
    return labels_from_output(output.movedim(dim, 0), o.threshold);
  }
  // The most probable channel and whether it reaches the threshold: sigmoid is monotonic, so the
  // highest logit is the highest probability (max returns the first on a tie: the lower label).
  const auto [top, channel] = torch::sigmoid(output.to(torch::kFloat)).max(dim);
  return (channel + 1).masked_fill(top.lt(effective_threshold(o)), 0).to(torch::kUInt8);
}

torch::Tensor remove_small_components(const torch::Tensor& labels, int64_t min_size) {
  if (min_size <= 1) return labels;  // every component has at least one voxel
  torch::Tensor out = labels.to(torch::kCPU, torch::kUInt8).contiguous().clone();
  uint8_t* v = out.data_ptr<uint8_t>();
  const int64_t n = out.numel();
  const int64_t top = n > 0 ? out.max().item<int64_t>() : 0;
  for (int64_t k = 1; k <= top; ++k) {
    const ComponentLabels comp = label_components(out.eq(k), /*connectivity=*/26);
    if (comp.count == 0) continue;
    const int32_t* c = comp.labels.data_ptr<int32_t>();
    std::vector<int64_t> sizes(static_cast<size_t>(comp.count) + 1, 0);
    for (int64_t i = 0; i < n; ++i) ++sizes[static_cast<size_t>(c[i])];
    for (int64_t i = 0; i < n; ++i) {
      if (c[i] > 0 && sizes[static_cast<size_t>(c[i])] < min_size) v[i] = 0;
    }
  }
  return out.to(labels.device());
}

}  // namespace u3d
