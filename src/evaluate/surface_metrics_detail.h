// Helpers shared by surface_metrics.cpp and topology.cpp (private to src/evaluate).
#pragma once
#include <torch/torch.h>

namespace u3d::surface_metrics_detail {

// A (D, H, W) tensor as a contiguous CPU uint8 mask with values {0, 1} (nonzero -> 1). `what`
// names the argument in the DataError thrown for a tensor that is not 3-D.
torch::Tensor binary_mask(const torch::Tensor& t, const char* what);

}  // namespace u3d::surface_metrics_detail
