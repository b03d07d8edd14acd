// 3D networks, and the U-Nets' 2D form on slices (model.dims 2: every convolution a Conv2d across the
// slice axis, model/stage_conv.h; inputs and outputs still 5-D with size 1 there). Every architecture
// derives from NetworkImpl so the trainer, checkpoints and the predictor handle them alike.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/model/stage_conv.h"

namespace u3d {

class NetworkImpl : public torch::nn::Module {
 public:
  ~NetworkImpl() override = default;
  // (N, C_in, D, H, W) -> (N, C_out, D, H, W): logits (segmentation) or the regression output.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
  // Outputs at every supervised resolution, full resolution first: [(N, C_out, D, H, W),
  // (N, C_out, D / s_D, H / s_H, W / s_W), ...] with each stage's down-sampling s (stage_scale,
  // core/stage_geometry.h). Networks without deep supervision return {forward(x)}.
  virtual std::vector<torch::Tensor> forward_deep(const torch::Tensor& x) { return {forward(x)}; }
  // A size every spatial axis of an input may take: the largest of size_divisors().
  virtual int64_t size_divisor() const = 0;
  // What each spatial axis (D, H, W) of an input must divide by (model.strides: may differ per axis).
  virtual Shape3 size_divisors() const {
    const int64_t d = size_divisor();
    return {d, d, d};
  }
};
using Network = std::shared_ptr<NetworkImpl>;

// How a ConvBlock differs from the model's defaults (kernel model.kernel_size, a bias only without
// a norm, the activation at the end).
struct ConvBlockShape {
  Shape3 kernel = {0, 0, 0};  // (D, H, W); 0: model.kernel_size
  std::optional<bool> bias;   // unset: only when model.norm is none
  bool activate = true;       // false: conv -> [dropout] -> [norm] (before a residual sum)
};

// conv -> [dropout] -> [norm] -> activation, the unit every stage is made of; padding kernel / 2 per axis.
// (N, in, D, H, W) -> (N, out, D / s_D, H / s_H, W / s_W) for the stride s = (s_D, s_H, s_W)
class ConvBlockImpl : public torch::nn::Module {
 public:
  ConvBlockImpl(int64_t in, int64_t out, const Shape3& stride, const ModelConfig& cfg, ConvBlockShape shape = {});
  ConvBlockImpl(int64_t in, int64_t out, int64_t stride, const ModelConfig& cfg, ConvBlockShape shape = {})
      : ConvBlockImpl(in, out, Shape3{stride, stride, stride}, cfg, shape) {}
  torch::Tensor forward(const torch::Tensor& x);
  // forward(torch::cat(parts, 1)) with the convolution over the parts (StageConv::over_concat,
  // model/split_concat_conv.h): parts (N, c_i, D, H, W), sum of c_i = in.
  torch::Tensor forward_parts(const std::vector<torch::Tensor>& parts);
  // The norm's affine weight and bias (zeroed for nnU-Net's residual-block init), or null.
  torch::nn::Module* norm() { return norm_.is_empty() ? nullptr : norm_.ptr().get(); }

 private:
  torch::Tensor after_conv(torch::Tensor y);  // dropout, norm and activation: what follows the convolution

  StageConv conv_;  // Conv3d, or Conv2d with model.dims 2 (model/stage_conv.h)
  torch::nn::Dropout3d dropout_{nullptr};
  torch::nn::AnyModule norm_;
  Activation activation_;
  double negative_slope_;
  bool activate_;
};
TORCH_MODULE(ConvBlock);

// nnU-Net's residual basic block (BasicBlockD of dynamic_network_architectures), the unit of the
// residual encoder: activation(conv2(conv1(x)) + skip(x)), where conv1 is conv -> norm ->
// activation (with the stride), conv2 is conv -> norm, and skip is the identity, average pooling
// by the stride when there is one (model/mean_pool.h: deterministic on CUDA), and a 1x1x1 convolution
// (no bias) -> norm when in != out. Convolutions carry a bias (nnU-Net's conv_bias); conv2's norm
// starts at weight 0, bias 0, so each block starts as its skip path (nnU-Net's
// init_last_bn_before_add_to_0).
// Both convolutions use `kernel` ({0, 0, 0}: model.kernel_size).
// (N, in, D, H, W) -> (N, out, D / s_D, H / s_H, W / s_W) for the stride s = (s_D, s_H, s_W)
class ResidualBlockImpl : public torch::nn::Module {
 public:
  ResidualBlockImpl(int64_t in, int64_t out, const Shape3& stride, const ModelConfig& cfg,
                    const Shape3& kernel = {0, 0, 0});
  ResidualBlockImpl(int64_t in, int64_t out, int64_t stride, const ModelConfig& cfg)
      : ResidualBlockImpl(in, out, Shape3{stride, stride, stride}, cfg) {}
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ConvBlock conv1_{nullptr}, conv2_{nullptr};
  Shape3 stride_;               // skip path: mean_pool3d by the stride
  ConvBlock project_{nullptr};  // in != out
  Activation activation_;
  double negative_slope_;
};
TORCH_MODULE(ResidualBlock);

// Configurable U-Net: `levels` stages; stage l has min(base * 2^l, max) filters and
// `convs_per_level` ConvBlocks of kernel stage_kernel(cfg, l), the first with the stride
// stage_stride(cfg, l) (strided-conv down-sampling; core/stage_geometry.h: model.kernel_sizes and
// model.strides, by default 3^3 kernels and stride 2 on every axis after stage 0); the decoder
// up-samples stage l + 1 with a transposed convolution of kernel = stride = stage_stride(cfg, l + 1),
// concatenates the skip connection and applies `convs_per_level` ConvBlocks of stage l's kernel
// (nnU-Net's PlainConvUNet); a 1x1x1 convolution is the head.
// With model.deep_supervision every decoder stage but the last also gets a 1x1x1 head
// (nnU-Net's 3d_fullres): forward_deep returns levels - 1 outputs, full resolution first, while
// forward (prediction) still returns the full-resolution one alone.
//
// model.architecture resenc_unet (nnU-Net's ResidualEncoderUNet): the encoder is a stem ConvBlock
// (in -> base filters, stage 0's kernel) and, per level l, blocks_per_level[l] ResidualBlocks of
// stage l's kernel, the first with stage l's stride; the decoder is the one above with convs_per_level ConvBlocks per
// stage (nnU-Net: 1); every convolution has a bias. Parameter names: encoder<l>.<i>..., up<l>, decoder<l>.<i>..., head,
// deep_head<l>.
//
// model.activation_checkpointing (model/checkpointing.h): in training with autograd on, the blocks
// of each encoder stage (encoder, all) and of each decoder stage (all) run checkpointed one by one
// (ConvBlocks; the stem and ResidualBlocks): only each block's input is kept for the backward pass,
// which recomputes one block at a time. Up-convolutions, heads and the concatenations run plainly.
class UNet3dImpl : public NetworkImpl {
 public:
  UNet3dImpl(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x) override;
  std::vector<torch::Tensor> forward_deep(const torch::Tensor& x) override;
  int64_t size_divisor() const override { return std::max({divisors_[0], divisors_[1], divisors_[2]}); }
  Shape3 size_divisors() const override { return divisors_; }  // patch_divisor(cfg)
  const std::vector<int64_t>& filters() const { return filters_; }
  // Decoder stages without the concatenation copy: the first ConvBlock of each stage convolves the
  // up-sampled tensor and the skip separately and sums (ConvBlockImpl::forward_parts,
  // model/split_concat_conv.h); equal within rounding, the same parameters. Off by default (the
  // concatenation, bit for bit as before). A decoder checkpointed block by block
  // (activation_checkpointing all, in training) keeps the concatenation.
  void set_split_concat(bool on) { split_concat_ = on; }

 private:
  int64_t levels_;
  bool split_concat_ = false;
  Shape3 divisors_;
  std::vector<int64_t> filters_;
  OutputActivation output_activation_;
  Checkpointing checkpointing_;
  bool dropout_;                                // the recomputation must draw the forward's dropout masks
  std::vector<torch::nn::Sequential> encoder_;  // one per level
  std::vector<StageConv> up_;                   // levels - 1, deepest first (transposed)
  std::vector<torch::nn::Sequential> decoder_;  // levels - 1, deepest first
  StageConv head_;
  std::vector<StageConv> deep_heads_;  // deep supervision: levels 1 .. levels - 2, finest first

  // Runs the network; with `deep`, also collects the deep-supervision outputs (finest first).
  torch::Tensor run(const torch::Tensor& x, std::vector<torch::Tensor>* deep);
  // stage->forward(x), block by block checkpointed when `checkpoint` and training with autograd on.
  torch::Tensor run_stage(torch::nn::Sequential& stage, const torch::Tensor& x, bool checkpoint);
};

// Residual blocks of encoder level `level` (resenc_unet): model.blocks_per_level, or nnU-Net's
// 1, 3, 4, 6, 6, 6, 6, 6 when it is empty.
int64_t residual_blocks(const ModelConfig& cfg, int64_t level);

// The network `cfg` describes; weights initialised (Kaiming normal) from the current torch seed.
Network build_network(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels);
// Number of parameters (trainable only by default).
int64_t count_parameters(const torch::nn::Module& module, bool trainable_only = true);

// FLOPs (2 x multiply-adds, the convention of FLOP counters and GPU peak figures) of every
// convolution and transposed convolution that `run` executes on the calling thread, read from the
// shapes of each aten::convolution call (a RecordFunction observer): a convolution costs
// 2 * N * prod(output spatial) * weight.numel(), a transposed one 2 * N * prod(input spatial) *
// weight.numel(). Norms, activations, pooling and the loss are left out (a few % of a U-Net).
int64_t count_conv_flops(const std::function<void()>& run);
// Forward FLOPs of `net` for one sample of `in_channels` x `patch`, counted as count_conv_flops
// does from the network's own forward: run once in eval mode without gradients on one sample of
// size_divisors() on the network's device, then scaled by the voxel ratio (exact: every
// convolution's cost is linear in the voxels when each axis divides by size_divisors()); the full
// patch when it does not divide. A training step costs about 3x this per sample (forward, and a
// backward of twice the forward: gradients of inputs and of weights).
int64_t forward_flops(NetworkImpl& net, const Shape3& patch, int64_t in_channels);

}  // namespace u3d
