#include "u3d/kernels/fused_norm_act.h"

#include "u3d/core/errors.h"

#ifdef U3D_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "norm_act_launch.h"
#include "tensor_dtype.h"
#endif

namespace u3d::kernels {
namespace {

// A per-channel float32 vector for x: (C), contiguous, on x's device (weight, bias, running statistics).
bool is_channel_vector(const torch::Tensor& p, const torch::Tensor& x) {
  return p.defined() && p.scalar_type() == torch::kFloat && p.dim() == 1 && p.numel() == x.size(1) &&
         p.is_contiguous() && p.device() == x.device();
}

#ifdef U3D_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Float32 scratch of `count` structs of `Struct` (whose members are floats), on x's device.
template <typename Struct>
torch::Tensor scratch(const torch::Tensor& x, int64_t count) {
  static_assert(sizeof(Struct) % sizeof(float) == 0);
  return torch::empty({count * static_cast<int64_t>(sizeof(Struct) / sizeof(float))},
                      x.options().dtype(torch::kFloat).memory_format(at::MemoryFormat::Contiguous));
}

template <typename Struct>
Struct* as(const torch::Tensor& t) {
  return reinterpret_cast<Struct*>(t.data_ptr<float>());
}

float* optional_ptr(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

launch::NormActShape shape_of(const torch::Tensor& x, int64_t groups, bool batch) {
  launch::NormActShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  s.s = x.numel() / (s.n * s.c);
  s.groups = groups;
  s.batch = batch;
  return s;
}

// Chunks of S per sample: about four blocks per SM over the batch, each at least `rows` voxels.
int64_t chunks_for(const launch::NormActShape& s) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t rows = launch::reduction_rows(s.c);
  const int64_t most = std::max<int64_t>(1, s.s / rows);
  return std::clamp<int64_t>((4 * sms + s.n - 1) / s.n, 1, most);
}

class NormActFunction : public torch::autograd::Function<NormActFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& running_mean,
                               const torch::Tensor& running_var, int64_t groups, bool batch, double momentum,
                               double eps, double slope) {
    const c10::cuda::CUDAGuard device(x.device());
    const launch::NormActShape shape = shape_of(x, groups, batch);
    const int64_t chunks = chunks_for(shape);
    const torch::Tensor partial = scratch<Moments>(x, shape.n * chunks * shape.c);
    const torch::Tensor channel = scratch<Moments>(x, shape.n * shape.c);
    const torch::Tensor affine = scratch<ChannelAffine>(x, shape.affine_rows() * shape.c);
    torch::Tensor y = at::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast3d);
    C10_CUDA_CHECK(launch::norm_act_forward(
        x.data_ptr(), y.data_ptr(), launch::dtype_of(x), shape, chunks, weight.data_ptr<float>(),
        bias.data_ptr<float>(), static_cast<float>(eps), optional_ptr(running_mean), optional_ptr(running_var),
        static_cast<float>(momentum), static_cast<float>(slope), as<Moments>(partial), as<Moments>(channel),
        as<ChannelAffine>(affine), at::cuda::getCurrentCUDAStream()));
    ctx->save_for_backward({x, weight, affine});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["batch"] = batch;
    ctx->saved_data["slope"] = slope;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &affine = saved[2];
    const c10::cuda::CUDAGuard device(x.device());
    const launch::NormActShape shape =
        shape_of(x, ctx->saved_data["groups"].toInt(), ctx->saved_data["batch"].toBool());
    const int64_t chunks = chunks_for(shape);
    const torch::Tensor dy = grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast3d);
    const torch::Tensor partial = scratch<GradSums>(x, shape.n * chunks * shape.c);
    const torch::Tensor channel = scratch<GradSums>(x, shape.n * shape.c);
    const torch::Tensor coef = scratch<DxCoefficients>(x, shape.affine_rows() * shape.c);
    torch::Tensor dweight = torch::empty_like(weight), dbias = torch::empty_like(weight);
    torch::Tensor dx = at::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast3d);
    C10_CUDA_CHECK(launch::norm_act_backward(
        dy.data_ptr(), x.data_ptr(), dx.data_ptr(), launch::dtype_of(x), shape, chunks, weight.data_ptr<float>(),
        as<ChannelAffine>(affine), static_cast<float>(ctx->saved_data["slope"].toDouble()), as<GradSums>(partial),
        as<GradSums>(channel), as<DxCoefficients>(coef), dweight.data_ptr<float>(), dbias.data_ptr<float>(),
        at::cuda::getCurrentCUDAStream()));
    return {dx, dweight, dbias, {}, {}, {}, {}, {}, {}, {}};
  }
};
#endif

torch::Tensor run(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                  const torch::Tensor& running_mean, const torch::Tensor& running_var, int64_t groups, bool batch,
                  double momentum, double eps, FusedActivation act) {
  if (!applies(x, weight, bias)) {
    throw TrainingError(fmt::format("fused norm kernels: input {} ({}, {}) is not one they take{}",
                                    fmt::join(x.sizes(), "x"), c10::toString(x.scalar_type()), x.device().str(),
                                    built() ? "" : " (this build has no CUDA kernels)"));
  }
#ifdef U3D_CUDA_KERNELS
  // The profiler's name for the forward's kernels (app/step_profile.h files it under normalisation;
  // the backward's run under the autograd node NormActFunction, a replayed graph's by kernel name).
  RECORD_FUNCTION("u3d::fused_norm_act", std::vector<c10::IValue>({x}));
  return NormActFunction::apply(x, weight, bias, running_mean, running_var, groups, batch, momentum, eps, act.slope);
#else
  (void)running_mean, (void)running_var, (void)groups, (void)batch, (void)momentum, (void)eps, (void)act;
  return {};
#endif
}

}  // namespace

bool built() {
#ifdef U3D_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

std::string architectures() {
#ifdef U3D_CUDA_KERNELS
  return U3D_CUDA_KERNEL_ARCHITECTURES;
#else
  return "";
#endif
}

std::string device_architecture(const torch::Device& device) {
#ifdef U3D_CUDA_KERNELS
  if (!device.is_cuda()) return "";
  const auto* props = at::cuda::getDeviceProperties(device.has_index() ? device.index() : at::cuda::current_device());
  return fmt::format("sm_{}{}", props->major, props->minor);
#else
  (void)device;
  return "";
#endif
}

bool applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!built() || !x.defined() || !x.is_cuda() || x.dim() != 5) return false;
  const auto t = x.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  if (x.is_contiguous() || !x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) return false;
  if (x.size(1) > 1024 || x.numel() == 0) return false;
  if (x.size(0) > 65535) return false;  // the batch is the launch grid's y (at most 65535 blocks)
  return is_channel_vector(weight, x) && is_channel_vector(bias, x);
}

torch::Tensor group_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             int64_t groups, double eps, FusedActivation act) {
  if (x.dim() == 5 && (groups <= 0 || x.size(1) % groups != 0)) {
    throw TrainingError(fmt::format("fused group norm: {} channels do not split into {} groups", x.size(1), groups));
  }
  return run(x, weight, bias, {}, {}, groups, /*batch=*/false, /*momentum=*/0.0, eps, act);
}

torch::Tensor batch_norm_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                             const torch::Tensor& running_mean, const torch::Tensor& running_var, double momentum,
                             double eps, FusedActivation act) {
  for (const torch::Tensor* t : {&running_mean, &running_var}) {
    if (t->defined() && x.dim() == 5 && !is_channel_vector(*t, x)) {
      throw TrainingError(
          fmt::format("fused batch norm: running statistics must be float32 ({}) on {}", x.size(1), x.device().str()));
    }
  }
  if (running_mean.defined() != running_var.defined()) {
    throw TrainingError("fused batch norm: running_mean and running_var are given together or not at all");
  }
  return run(x, weight, bias, running_mean, running_var, /*groups=*/0, /*batch=*/true, momentum, eps, act);
}

}  // namespace u3d::kernels
