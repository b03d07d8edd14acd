#include "u3d/model/split_concat_conv.h"

#include "u3d/kernels/fused_families.h"

namespace u3d {
namespace {

template <size_t D, class Derived>
torch::Tensor over_concat(const torch::nn::ConvNdImpl<D, Derived>& conv, const std::vector<torch::Tensor>& parts) {
  const auto& o = conv.options;
  TORCH_CHECK(!parts.empty(), "conv_over_concat: no parts");
  TORCH_CHECK(o.groups() == 1, "conv_over_concat: groups ", o.groups(), ", expected 1");
  TORCH_CHECK(std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()),
              "conv_over_concat: padding mode other than zeros");
  const auto* padding = std::get_if<torch::ExpandingArray<D>>(&o.padding());
  TORCH_CHECK(padding, "conv_over_concat: padding 'same' or 'valid', expected explicit sizes");
  const int64_t in_axis = o.transposed() ? 0 : 1;  // weight (out, in, k...) or transposed (in, out, k...)
  int64_t offset = 0;
  torch::Tensor out;
  for (const torch::Tensor& part : parts) {
    const int64_t channels = part.size(1);
    TORCH_CHECK(offset + channels <= o.in_channels(), "conv_over_concat: parts of more than ", o.in_channels(),
                " channels");
    const torch::Tensor w = conv.weight.narrow(in_axis, offset, channels);
    const torch::Tensor b = offset == 0 ? conv.bias : torch::Tensor();  // undefined without a bias
    torch::Tensor y =
        at::convolution(part, w, b, o.stride(), *padding, o.dilation(), o.transposed(), o.output_padding(), 1);
    if (offset == 0) {
      out = std::move(y);
    } else {
      out.add_(y);
    }
    offset += channels;
  }
  TORCH_CHECK(offset == o.in_channels(), "conv_over_concat: parts of ", offset, " channels, expected ",
              o.in_channels());
  return out;
}

}  // namespace

torch::Tensor conv_over_concat(const torch::nn::Conv3dImpl& conv, const std::vector<torch::Tensor>& parts) {
  return over_concat(conv, parts);
}
torch::Tensor conv_over_concat(const torch::nn::Conv2dImpl& conv, const std::vector<torch::Tensor>& parts) {
  return over_concat(conv, parts);
}
torch::Tensor conv_over_concat(const torch::nn::ConvTranspose3dImpl& conv, const std::vector<torch::Tensor>& parts) {
  return over_concat(conv, parts);
}
torch::Tensor conv_over_concat(const torch::nn::ConvTranspose2dImpl& conv, const std::vector<torch::Tensor>& parts) {
  return over_concat(conv, parts);
}

bool split_concat_applies(bool asked, const torch::Tensor& x) {
  return asked || (kernels::enabled(kernels::Family::kDecoderConcat) && x.is_cuda());
}

}  // namespace u3d
