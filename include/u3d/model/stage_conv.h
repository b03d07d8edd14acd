// The convolutions of the U-Nets (model/unet.h) in 3D or 2D, with 5-D tensors on both sides:
// (N, in, D, H, W) -> (N, out, D', H', W').
//   model.dims 3: a Conv3d (or ConvTranspose3d) with the (D, H, W) kernel, stride and padding.
//   model.dims 2: a Conv2d (or ConvTranspose2d) over the two axes other than model.slice_axis
//     (in_plane of each triple: the slice axis's entries are 1, core/stage_geometry.h), applied to
//     the input squeezed along the slice axis (size 1 there) and unsqueezed after: weights
//     (out, in, k_H, k_W). Squeeze and unsqueeze are views: a channels-last 3D input gives a
//     channels-last 2D one, so cuDNN runs its NHWC 2D kernels. Norms, dropout and pooling stay 5-D
//     (with size 1 on the slice axis they compute what their 2D forms would); batch norm runs on a
//     4-D view, as BatchNorm2d would (model/channels_last_batch_norm.h).
// The module is registered by its owner under the name the 3D network always used ("conv", "up<l>",
// "head"), so 3D parameter names and checkpoints are unchanged.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/core/config.h"

namespace u3d {

struct ConvSpec {
  int64_t in = 0, out = 0;
  Shape3 kernel = {1, 1, 1}, stride = {1, 1, 1}, padding = {0, 0, 0};  // (D, H, W)
  bool bias = true;
  bool transposed = false;  // ConvTranspose (the decoder's up-sampling; padding unused)
};

class StageConv {
 public:
  StageConv() = default;
  StageConv(const ModelConfig& cfg, const ConvSpec& spec);
  torch::Tensor operator()(const torch::Tensor& x);
  // operator()(torch::cat(parts, 1)) without the concatenation (model/split_concat_conv.h): parts
  // (N, c_i, D, H, W) with sum of c_i = in, each squeezed along the slice axis for a 2D convolution.
  torch::Tensor over_concat(const std::vector<torch::Tensor>& parts);
  // The torch module to register (Conv3d, ConvTranspose3d, Conv2d or ConvTranspose2d).
  std::shared_ptr<torch::nn::Module> module() const { return conv_.ptr(); }
  bool defined() const { return !conv_.is_empty(); }

 private:
  torch::nn::AnyModule conv_;
  int64_t squeeze_dim_ = -1;  // the tensor dimension squeezed for a 2D convolution (slice axis + 2)
};

}  // namespace u3d
