// The one check that a tensor read from a file holds no NaN or Inf: the dataset reader, the
// importers and the data preflight all count through non_finite_count().
//
//   check_finite(image, "p.h5: case 'a': 'image'")  -> DataError "p.h5: case 'a': 'image' holds 3 NaN or Inf voxels"
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace u3d {

// The number of NaN or Inf elements; 0 for integer tensors.
int64_t non_finite_count(const torch::Tensor& t);
// DataError "<what> holds N NaN or Inf voxels" when non_finite_count(t) > 0.
void check_finite(const torch::Tensor& t, const std::string& what);

}  // namespace u3d
