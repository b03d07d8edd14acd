#include "u3d/model/channels_last_norm.h"

#include "u3d/core/errors.h"
#include "u3d/kernels/fused_families.h"

namespace u3d {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// (N, C, D, H, W) in ChannelsLast3d -> (N, S, G, C / G), a view of the same memory.
torch::Tensor grouped(const torch::Tensor& t, int64_t groups) {
  const int64_t n = t.size(0), c = t.size(1);
  return t.permute({0, 2, 3, 4, 1}).view({n, -1, groups, c / groups});
}

torch::Tensor channels_last_empty_like(const torch::Tensor& t) {
  return at::empty_like(t, t.options(), at::MemoryFormat::ChannelsLast3d);
}

class ChannelsLastNormFunction : public torch::autograd::Function<ChannelsLastNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& weight,
                               const torch::Tensor& bias, int64_t groups, double eps, int64_t activation,
                               double negative_slope) {
    const torch::Tensor x = x_in.contiguous(at::MemoryFormat::ChannelsLast3d);  // no-op on the model's path
    const torch::Tensor xv = grouped(x, groups);                                // (N, S, G, Cg)
    const std::vector<int64_t> dims = {1, 3};
    torch::Tensor mean, var;  // (N, 1, G, 1) float32
    if (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble) {
      std::tie(var, mean) = at::var_mean(xv, dims, /*correction=*/0, /*keepdim=*/true);
    } else {  // float32 accumulation without a float32 copy of x
      const double count = static_cast<double>(xv.size(1) * xv.size(3));
      mean = at::mean(xv, dims, /*keepdim=*/true, torch::kFloat);
      const torch::Tensor mean_sq =
          at::linalg_vector_norm(xv, 2, dims, /*keepdim=*/true, torch::kFloat).square_() / count;
      var = (mean_sq - mean * mean).clamp_min_(0.0);
    }
    const torch::Tensor rstd = (var + eps).rsqrt();  // (N, 1, G, 1)
    const torch::Tensor w = weight.view({1, 1, groups, -1}).to(rstd.scalar_type());
    const torch::Tensor b = bias.view({1, 1, groups, -1}).to(rstd.scalar_type());
    const torch::Tensor scale = rstd * w;  // (N, 1, G, Cg)
    const torch::Tensor shift = b - mean * scale;
    torch::Tensor y = channels_last_empty_like(x);
    torch::Tensor yv = grouped(y, groups);
    at::addcmul_out(yv, shift, xv, scale);  // float32 arithmetic, written in x's dtype
    switch (static_cast<NormActivation>(activation)) {
      case NormActivation::kRelu: yv.clamp_min_(0.0); break;
      case NormActivation::kLeakyRelu: at::leaky_relu_(yv, negative_slope); break;
      case NormActivation::kNone: break;
    }
    ctx->save_for_backward({x, y, weight, mean, rstd});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["negative_slope"] = negative_slope;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &rstd = saved[4];
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const auto activation = static_cast<NormActivation>(ctx->saved_data["activation"].toInt());
    const double negative_slope = ctx->saved_data["negative_slope"].toDouble();
    const torch::Tensor dy = grads[0].contiguous(at::MemoryFormat::ChannelsLast3d);  // no-op when it already is
    const torch::Tensor xv = grouped(x, groups), yv = grouped(y, groups), dyv = grouped(dy, groups);
    torch::Tensor g = dyv;  // dL/d(pre-activation), (N, S, G, Cg)
    switch (activation) {
      case NormActivation::kRelu: g = at::threshold_backward(dyv, yv, 0.0); break;
      case NormActivation::kLeakyRelu:
        g = at::leaky_relu_backward(dyv, yv, negative_slope, /*self_is_result=*/true);
        break;
      case NormActivation::kNone: break;
    }
    const auto acc = mean.scalar_type();
    const torch::Tensor sum_g = at::sum(g, {1}, /*keepdim=*/true, acc);        // (N, 1, G, Cg)
    const torch::Tensor sum_gx = at::sum(g * xv, {1}, /*keepdim=*/true, acc);  // (N, 1, G, Cg)
    const torch::Tensor sum_gxhat = rstd * (sum_gx - mean * sum_g);            // sum of g * xhat per channel
    const torch::Tensor w = weight.view({1, 1, groups, -1}).to(acc);
    const int64_t c = x.size(1);
    torch::Tensor dx, dweight, dbias;
    if (ctx->needs_input_grad(0)) {
      const double count = static_cast<double>(xv.size(1) * xv.size(3));
      const torch::Tensor a = (w * sum_g).sum(3, /*keepdim=*/true) / count;       // mean of g * w per group
      const torch::Tensor bm = (w * sum_gxhat).sum(3, /*keepdim=*/true) / count;  // mean of g * w * xhat
      // dx = rstd * (g * w - a - xhat * bm) = g * scale + x * k1 + k0
      const torch::Tensor scale = rstd * w;
      const torch::Tensor k1 = -rstd * rstd * bm;
      const torch::Tensor k0 = rstd * (rstd * bm * mean - a);
      dx = channels_last_empty_like(x);
      torch::Tensor dxv = grouped(dx, groups);
      at::addcmul_out(dxv, k0, xv, k1);
      dxv.addcmul_(g, scale);
    }
    if (ctx->needs_input_grad(1)) dweight = sum_gxhat.sum(0).reshape({c}).to(weight.scalar_type());
    if (ctx->needs_input_grad(2)) dbias = sum_g.sum(0).reshape({c}).to(weight.scalar_type());
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor apply_activation(const torch::Tensor& y, NormActivation activation, double negative_slope) {
  switch (activation) {
    case NormActivation::kRelu: return torch::relu(y);
    case NormActivation::kLeakyRelu: return torch::leaky_relu(y, negative_slope);
    case NormActivation::kNone: break;
  }
  return y;
}

torch::Tensor channels_last_norm_kernel(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                        int64_t groups, double eps, NormActivation activation, double negative_slope) {
  if (groups <= 0 && x.dim() == 5) groups = x.size(1);
  if (x.dim() != 5 || x.size(1) % groups != 0) {
    throw TrainingError(fmt::format("channels-last norm: input {} does not split into {} groups of channels",
                                    fmt::join(x.sizes(), "x"), groups));
  }
  return ChannelsLastNormFunction::apply(x, weight, bias, groups, eps, static_cast<int64_t>(activation),
                                         negative_slope);
}

torch::Tensor channels_last_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                 int64_t groups, double eps, NormActivation activation, double negative_slope) {
  if (x.dim() == 5 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) {
    if (kernels::enabled(kernels::Family::kGroupNorm) && kernels::applies(x, weight, bias)) {
      return kernels::group_norm_act(x, weight, bias, groups <= 0 ? x.size(1) : groups, eps,
                                     fused_activation(activation, negative_slope));
    }
    return channels_last_norm_kernel(x, weight, bias, groups, eps, activation, negative_slope);
  }
  const bool cudnn = at::globalContext().userEnabledCuDNN();
  const torch::Tensor y = groups <= 0 ? torch::instance_norm(x, weight, bias, /*running_mean=*/{}, /*running_var=*/{},
                                                             /*use_input_stats=*/true, /*momentum=*/0.1, eps, cudnn)
                                      : torch::group_norm(x, groups, weight, bias, eps, cudnn);
  return apply_activation(y, activation, negative_slope);
}

ChannelsLastNormImpl::ChannelsLastNormImpl(int64_t channels, int64_t groups, double eps)
    : channels_(channels), groups_(groups), eps_(eps) {
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
}

torch::Tensor ChannelsLastNormImpl::forward_act(const torch::Tensor& x, NormActivation activation,
                                                double negative_slope) {
  return channels_last_norm(x, weight, bias, groups_, eps_, activation, negative_slope);
}

torch::Tensor strictly_channels_last(const torch::Tensor& t) {
  if (t.dim() != 5 && t.dim() != 4) return t;
  const int64_t c = t.size(1), d = t.dim() == 5 ? t.size(2) : 1, h = t.size(-2), w = t.size(-1);
  const std::vector<int64_t> strides = t.dim() == 5 ? std::vector<int64_t>{c * d * h * w, 1, c * h * w, c * w, c}
                                                    : std::vector<int64_t>{c * h * w, 1, c * w, c};
  if (t.strides() == c10::IntArrayRef(strides)) return t;
  return at::empty_strided(t.sizes(), strides, t.options()).copy_(t);
}

kernels::FusedActivation fused_activation(NormActivation activation, double negative_slope) {
  switch (activation) {
    case NormActivation::kRelu: return kernels::FusedActivation::relu();
    case NormActivation::kLeakyRelu: return kernels::FusedActivation::leaky_relu(negative_slope);
    case NormActivation::kNone: break;
  }
  return kernels::FusedActivation::none();
}

std::optional<NormActivation> fusable_activation(Activation activation) {
  switch (activation) {
    case Activation::kRelu: return NormActivation::kRelu;
    case Activation::kLeakyRelu: return NormActivation::kLeakyRelu;
    case Activation::kGelu:
    case Activation::kElu: break;
  }
  return std::nullopt;
}

}  // namespace u3d
