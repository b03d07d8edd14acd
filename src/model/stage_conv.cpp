#include "u3d/model/stage_conv.h"

#include "u3d/core/stage_geometry.h"

namespace u3d {
namespace {

template <size_t N>
torch::ExpandingArray<N> sizes(const Shape3& s, int64_t slice_axis) {
  if constexpr (N == 3) {
    return torch::ExpandingArray<3>(at::IntArrayRef(s.data(), 3));
  } else {
    const Shape2 p = in_plane(s, slice_axis);
    return torch::ExpandingArray<2>(at::IntArrayRef(p.data(), 2));
  }
}

template <class Conv, class Options, size_t N>
torch::nn::AnyModule make(const ConvSpec& c, int64_t axis) {
  auto options = Options(c.in, c.out, sizes<N>(c.kernel, axis)).stride(sizes<N>(c.stride, axis)).bias(c.bias);
  if constexpr (std::is_same_v<Options, torch::nn::Conv3dOptions> ||
                std::is_same_v<Options, torch::nn::Conv2dOptions>) {
    options = options.padding(sizes<N>(c.padding, axis));
  }
  return torch::nn::AnyModule(Conv(options));
}

}  // namespace

StageConv::StageConv(const ModelConfig& cfg, const ConvSpec& spec) {
  const int64_t axis = cfg.slice_axis;
  if (cfg.dims == 2) {
    squeeze_dim_ = axis + 2;
    conv_ = spec.transposed ? make<torch::nn::ConvTranspose2d, torch::nn::ConvTranspose2dOptions, 2>(spec, axis)
                            : make<torch::nn::Conv2d, torch::nn::Conv2dOptions, 2>(spec, axis);
  } else {
    conv_ = spec.transposed ? make<torch::nn::ConvTranspose3d, torch::nn::ConvTranspose3dOptions, 3>(spec, axis)
                            : make<torch::nn::Conv3d, torch::nn::Conv3dOptions, 3>(spec, axis);
  }
}

torch::Tensor StageConv::operator()(const torch::Tensor& x) {
  if (squeeze_dim_ < 0) return conv_.forward(x);
  return conv_.forward(x.squeeze(squeeze_dim_)).unsqueeze(squeeze_dim_);
}

}  // namespace u3d
