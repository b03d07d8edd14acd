// The OpenKBP challenge's provided network (github.com/ababier/open-kbp,
// provided_code/network_architectures.py, DefineDoseFromCT.define_generator), layer for layer in
// LibTorch: `model.architecture: openkbp_baseline`, f = model.base_filters (the challenge suggests
// 64; its code defaults to 1). Other model.* keys do not apply to it.
//
//   encoder  x1..x6: Conv3d 4x4x4 stride 2 'same' (padding 1), no bias, filters f, 2f, 4f, 8f, 8f, 8f;
//            BatchNorm (Keras momentum 0.99 = torch momentum 0.01, eps 1e-3) on x1..x5, not on x6;
//            LeakyReLU 0.2
//   decoder  x5b = up(x6, 8f); x4b = up([x5b, x5], 8f, dropout); x3b = up([x4b, x4], 4f);
//            x2b = up([x3b, x3], 2f, dropout); x1b = up([x2b, x2], f)
//            up = ConvTranspose3d 4x4x4 stride 2 'same' (padding 1), no bias; BatchNorm;
//            [spatial (channel) dropout 0.2]; ReLU
//   head     ConvTranspose3d([x1b, x1] -> out_channels) 4x4x4 stride 2 'same' with bias;
//            AvgPool 3x3x3 stride 1 'same' (padding 1, padded voxels left out of the average);
//            ReLU
// Weights start as Keras's defaults (Glorot uniform kernels, zero bias, BN scale 1 shift 0). With
// 11 input channels and f = 64 it has 116,975,361 trainable parameters. Inputs must divide by 64
// in every spatial axis (six stride-2 stages): 128^3 for OpenKBP.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/core/config.h"
#include "u3d/model/unet.h"

namespace u3d {

// The head's 3x3x3 'same' average (padded voxels left out), (N, C, D, H, W) -> same shape.
// `by_convolution`: as a depthwise convolution with a ones kernel divided by the in-volume count,
// the same values to float rounding; used on CUDA under deterministic algorithms, where
// avg_pool3d's backward has no deterministic kernel.
torch::Tensor same_mean3(const torch::Tensor& y, bool by_convolution);

class OpenKbpBaselineImpl : public NetworkImpl {
 public:
  OpenKbpBaselineImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t size_divisor() const override { return 64; }
  // The transposed convolutions of up2..up5 and the head over (previous, skip) without the
  // concatenation copy (model/split_concat_conv.h: equal within rounding, the same parameters);
  // off by default.
  void set_split_concat(bool on) { split_concat_ = on; }

 private:
  bool split_concat_ = false;
  std::vector<torch::nn::Conv3d> down_;            // 6
  std::vector<torch::nn::BatchNorm3d> down_norm_;  // 5 (none on the last)
  std::vector<torch::nn::ConvTranspose3d> up_;     // 5
  std::vector<torch::nn::BatchNorm3d> up_norm_;    // 5
  torch::nn::Dropout3d dropout_{nullptr};          // after up 2 and 4
  torch::nn::ConvTranspose3d head_{nullptr};
};

}  // namespace u3d
