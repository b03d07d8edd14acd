#include "u3d/model/stage_conv.h"

#include "u3d/core/stage_geometry.h"
#include "u3d/model/split_concat_conv.h"

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

torch::Tensor StageConv::over_concat(const std::vector<torch::Tensor>& parts) {
  const torch::nn::Module& m = *conv_.ptr();
  std::vector<torch::Tensor> squeezed;
  if (squeeze_dim_ >= 0) {
    for (const torch::Tensor& p : parts) squeezed.push_back(p.squeeze(squeeze_dim_));
  }
  const std::vector<torch::Tensor>& in = squeeze_dim_ < 0 ? parts : squeezed;
  torch::Tensor y;
  if (const auto* c = m.as<torch::nn::Conv3d>()) {
    y = conv_over_concat(*c, in);
  } else if (const auto* c2 = m.as<torch::nn::Conv2d>()) {
    y = conv_over_concat(*c2, in);
  } else if (const auto* t = m.as<torch::nn::ConvTranspose3d>()) {
    y = conv_over_concat(*t, in);
  } else {
    y = conv_over_concat(*m.as<torch::nn::ConvTranspose2d>(), in);
  }
  return squeeze_dim_ < 0 ? y : y.unsqueeze(squeeze_dim_);
}

}  // namespace u3d
