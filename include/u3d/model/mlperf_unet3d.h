// The MLPerf Training 3D U-Net (KiTS19 benchmark; mlcommons/training, image_segmentation/pytorch/
// model/{unet3d.py,layers.py}, retired after round v4.0): `model.preset: mlperf_unet3d` (sets
// model.architecture mlperf_unet3d, levels 6, base_filters 32, max_filters 320, kernel 3, instance
// norm, relu, no deep supervision), layer for layer and name for name as the reference:
//
//   filters  f_l = min(base_filters * 2^l, max_filters), l = 0 .. levels - 1: 32 64 128 256 320 320
//   input_block          conv1: f_in -> f_0, conv2: f_0 -> f_0                     (N, f_0, D, H, W)
//   downsample.<i>       conv1: f_i -> f_{i+1} stride 2, conv2 (i = 0 .. levels - 3) (.., D / 2^(i+1), ..)
//   bottleneck           conv1: f_{L-2} -> f_{L-1} stride 2, conv2                   (.., D / 2^(L-1), ..)
//   upsample.<j>         upsample_conv: ConvTranspose3d 2^3 stride 2 with bias, f_{L-1-j} -> f_{L-2-j};
//                        cat(up, skip) on channels; conv1: 2 f_{L-2-j} -> f_{L-2-j}, conv2 (j = 0 .. L - 2)
//   output               conv: 1^3 convolution f_0 -> classes, with bias (logits)
//   every conv<k>        "<k>.0" Conv3d kernel 3 padding 1 without bias, "<k>.1" norm (affine; weight,
//                        bias), then the activation (fused into the norm, model/channels_last_norm.h)
//
// Parameter names as the reference's named_parameters(): input_block.conv1.0.weight,
// input_block.conv1.1.weight, ..., downsample.0.conv1.0.weight, bottleneck.conv2.1.bias,
// upsample.0.upsample_conv.0.weight, upsample.0.upsample_conv.0.bias, ..., output.conv.0.weight,
// output.conv.0.bias. With 1 input channel and 3 classes: 31,190,243 parameters (the reference's
// "about 31.19 M"); scripts/python/u3d_model.py (MlperfUNet3d) is the same network and
// tests/bundle/mlperf_mirror_test.sh compares both with the reference's layer list.
// Weights start as PyTorch's defaults (the reference's weights_init_scale 1): Kaiming uniform
// (a = sqrt(5)) kernels, uniform biases, norm weight 1 and bias 0.
//
// Cost: a 128^3 patch of one channel takes 0.955 TFLOP (2 x multiply-adds) of convolutions in the
// forward pass (count_conv_flops), about 3x that per training sample.
//
// model.norm batch or none and model.activation are honoured as the reference's options;
// model.deep_supervision, dropout and activation_checkpointing do not apply (validate() refuses them).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/core/config.h"
#include "u3d/model/unet.h"

namespace u3d {

// One "conv_block_factory" of the reference: "0" convolution (or transposed), "1" norm (none: no
// module, and the convolution has a bias), then the activation. (N, in, D, H, W) -> (N, out, ...).
class MlperfConvImpl : public torch::nn::Module {
 public:
  struct Shape {
    int64_t kernel = 3, stride = 1, padding = 1;
    bool transposed = false;
    bool plain = false;  // no norm, no activation (upsample_conv, output)
  };
  MlperfConvImpl(int64_t in, int64_t out, Shape shape, const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);
  // forward(torch::cat(parts, 1)) without the concatenation (a Conv3d; model/split_concat_conv.h).
  torch::Tensor forward_parts(const std::vector<torch::Tensor>& parts);

 private:
  torch::nn::AnyModule conv_, norm_;
  Activation activation_;
  torch::Tensor after_conv(torch::Tensor y);  // [norm] -> activation, unless plain
  double negative_slope_;
  bool plain_;
};
TORCH_MODULE(MlperfConv);

// input_block, downsample.<i>, bottleneck: conv1 (stride) -> conv2.
class MlperfBlockImpl : public torch::nn::Module {
 public:
  MlperfBlockImpl(int64_t in, int64_t out, int64_t stride, const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x) { return conv2_(conv1_(x)); }

 private:
  MlperfConv conv1_{nullptr}, conv2_{nullptr};
};
TORCH_MODULE(MlperfBlock);

// upsample.<j>: upsample_conv -> cat(., skip) -> conv1 -> conv2.
class MlperfUpBlockImpl : public torch::nn::Module {
 public:
  MlperfUpBlockImpl(int64_t in, int64_t out, const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip);
  void set_split_concat(bool on) { split_concat_ = on; }

 private:
  MlperfConv upsample_conv_{nullptr}, conv1_{nullptr}, conv2_{nullptr};
  bool split_concat_ = false;  // conv1 over (up, skip) without the concatenation
};
TORCH_MODULE(MlperfUpBlock);

class MlperfUNet3dImpl : public NetworkImpl {
 public:
  MlperfUNet3dImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t size_divisor() const override { return int64_t{1} << (levels_ - 1); }
  // Every upsample block's conv1 over (up, skip) without the concatenation copy
  // (model/split_concat_conv.h: equal within rounding, the same parameters); off by default.
  void set_split_concat(bool on);

 private:
  int64_t levels_;
  MlperfBlock input_block_{nullptr};
  torch::nn::ModuleList downsample_;  // levels - 2 MlperfBlocks
  MlperfBlock bottleneck_{nullptr};
  std::vector<MlperfUpBlock> upsample_;  // levels - 1, deepest first (registered as the ModuleList "upsample")
  torch::nn::ModuleList upsample_list_;
  MlperfConv output_conv_{nullptr};  // "output.conv"
};

}  // namespace u3d
