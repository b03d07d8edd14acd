#include "u3d/kernels/fused_loss.h"

#include "u3d/core/errors.h"
#include "u3d/kernels/fused_norm_act.h"
#include "u3d/kernels/loss_math.h"

#ifdef U3D_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "loss_launch.h"
#include "tensor_dtype.h"
#endif

namespace u3d::kernels {
namespace {

// Whether the logits are channels-last in memory (else they are contiguous NCDHW: loss_applies).
bool channels_last_logits(const torch::Tensor& logits) {
  return logits.is_contiguous(logits.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast);
}

#ifdef U3D_CUDA_KERNELS
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

launch::LossShape loss_shape_of(const torch::Tensor& logits, bool sigmoid) {
  launch::LossShape s;
  s.n = logits.size(0);
  s.c = logits.size(1);
  s.s = logits.numel() / (s.n * s.c);
  const bool last = channels_last_logits(logits);
  s.voxel_stride = last ? s.c : 1;
  s.channel_stride = last ? 1 : s.s;
  s.sigmoid = sigmoid;
  return s;
}

// The (N, W) table of loss_math.h's sums; backward: dx from the table's gradient.
class FusedLossFunction : public torch::autograd::Function<FusedLossFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                               bool sigmoid) {
    const c10::cuda::CUDAGuard device(logits.device());
    const launch::LossShape shape = loss_shape_of(logits, sigmoid);
    const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t chunks = launch::loss_chunks(shape.n, shape.s, sms);
    const int64_t width = RegionColumns{shape.c}.width();
    const auto f32 = logits.options().dtype(torch::kFloat).memory_format(at::MemoryFormat::Contiguous);
    const torch::Tensor partial = torch::empty({shape.n * chunks * width}, f32);
    torch::Tensor table = torch::empty({shape.n, width}, f32);
    C10_CUDA_CHECK(launch::region_loss_forward(logits.data_ptr(), labels.data_ptr<int64_t>(), launch::dtype_of(logits),
                                               shape, chunks, partial.data_ptr<float>(), table.data_ptr<float>(),
                                               at::cuda::getCurrentCUDAStream()));
    ctx->save_for_backward({logits, labels});
    ctx->saved_data["sigmoid"] = sigmoid;
    return table;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &labels = saved[1];
    const c10::cuda::CUDAGuard device(logits.device());
    const launch::LossShape shape = loss_shape_of(logits, ctx->saved_data["sigmoid"].toBool());
    const torch::Tensor grad = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor dx = at::empty_like(logits);  // the logits' strides (dense: channels-last or contiguous)
    C10_CUDA_CHECK(launch::region_loss_backward(logits.data_ptr(), labels.data_ptr<int64_t>(), launch::dtype_of(logits),
                                                shape, grad.data_ptr<float>(), dx.data_ptr(),
                                                at::cuda::getCurrentCUDAStream()));
    return {dx, {}, {}};
  }
};
#endif

RegionSums region_sums(const torch::Tensor& logits, const torch::Tensor& labels, Head head) {
  if (!loss_applies(logits, labels, head)) {
    throw TrainingError(
        fmt::format("fused loss kernels: logits {} ({}, {}) and labels {} ({}) are not inputs they take{}",
                    fmt::join(logits.sizes(), "x"), c10::toString(logits.scalar_type()), logits.device().str(),
                    fmt::join(labels.sizes(), "x"), c10::toString(labels.scalar_type()),
                    built() ? "" : " (this build has no CUDA kernels)"));
  }
#ifdef U3D_CUDA_KERNELS
  const int64_t c = logits.size(1);
  const RegionColumns cols{c};
  // The profiler's name for the forward's kernels (app/step_profile.h files it under loss; the backward's
  // run under the autograd node FusedLossFunction, a replayed graph's by kernel name, loss_*_kernel).
  RECORD_FUNCTION("u3d::fused_loss", std::vector<c10::IValue>({logits}));
  const torch::Tensor table = FusedLossFunction::apply(logits, labels, /*sigmoid=*/head == Head::kSigmoid);
  RegionSums r;
  r.ce = table.select(/*dim=*/1, cols.ce()).sum();
  r.inter = table.narrow(/*dim=*/1, cols.inter(0), c);
  r.psum = table.narrow(/*dim=*/1, cols.psum(0), c);
  r.ysum = table.narrow(/*dim=*/1, cols.ysum(0), c).detach();
  return r;
#else
  return {};
#endif
}

}  // namespace

bool loss_applies(const torch::Tensor& logits, const torch::Tensor& labels, Head head) {
  if (!built() || !logits.defined() || !logits.is_cuda() || (logits.dim() != 4 && logits.dim() != 5)) return false;
  const auto t = logits.scalar_type();
  if (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16) return false;
  if (logits.numel() == 0 || logits.size(0) > 65535) return false;
  if (!channels_last_logits(logits) && !logits.is_contiguous()) return false;
  const int64_t c = logits.size(1);
  if (c < (head == Head::kSigmoid ? 1 : 2) || c > kMaxLossChannels) return false;
  if (!labels.defined() || labels.scalar_type() != torch::kLong || labels.device() != logits.device()) return false;
  if (!labels.is_contiguous() || labels.dim() != logits.dim() - 1 || labels.size(0) != logits.size(0)) return false;
  for (int64_t d = 1; d < labels.dim(); ++d) {
    if (labels.size(d) != logits.size(d + 1)) return false;
  }
  return true;
}

RegionSums softmax_ce_dice_sums(const torch::Tensor& logits, const torch::Tensor& labels) {
  return region_sums(logits, labels, Head::kSoftmax);
}

RegionSums sigmoid_bce_dice_sums(const torch::Tensor& logits, const torch::Tensor& labels) {
  return region_sums(logits, labels, Head::kSigmoid);
}

}  // namespace u3d::kernels
