// The profile's categories (app/step_profile.h): operator and kernel names to categories.
#include <gtest/gtest.h>

#include "expectations.h"
#include "u3d/app/step_profile.h"

namespace u3d {
namespace {

TEST(StepProfile, OperatorsAndKernelsFallIntoTheirCategories) {
  test::expect_classes(
      op_category,
      {{"convolution",
        {"aten::cudnn_convolution", "aten::convolution_backward", "aten::addmm",
         "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32"}},
       {"normalisation",
        {"aten::native_batch_norm", "NativeBatchNormBackward0", "aten::native_group_norm",
         // the project's fused kernels (kernels/fused_norm_act.h): the forward's op, the backward's
         // autograd node, and kernel names as a replayed CUDA graph shows them
         "u3d::fused_norm_act", "torch::autograd::CppNode<u3d::kernels::(anonymous namespace)::NormActFunction>",
         "void u3d::kernels::launch::(anonymous namespace)::norm_act_grad_sums_kernel<__nv_bfloat16>(...)",
         "void u3d::kernels::launch::(anonymous namespace)::norm_act_dx_kernel<float, 8>(...)"}},
       {"activation", {"aten::leaky_relu", "aten::threshold_backward", "aten::_log_softmax"}},
       {"loss",
        {"aten::nll_loss2d_forward", "aten::binary_cross_entropy_with_logits", "NllLoss2DBackward0", "u3d::fused_loss",
         "torch::autograd::CppNode<u3d::kernels::(anonymous namespace)::FusedLossFunction>",
         "void u3d::kernels::launch::(anonymous namespace)::loss_sums_kernel<float, 4, false>(...)",
         "void u3d::kernels::launch::(anonymous namespace)::loss_dx_kernel<__nv_bfloat16, 16, true>(...)"}},
       {"copy/cast", {"aten::copy_", "aten::to", "aten::_to_copy", "Memcpy DtoD (Device -> Device)"}},
       {"reduction", {"aten::sum", "aten::linalg_vector_norm" /* not a normalisation */, "aten::max"}},
       {"optimizer",
        {"aten::_fused_adamw_", "aten::_foreach_norm" /* the gradient norm, with clipping */,
         "aten::_amp_foreach_non_finite_check_and_unscale_"}},
       {"elementwise",
        {"aten::add_", "aten::mul", "aten::where", "aten::eq",
         "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"}},
       {"other", {"aten::max_pool3d", "aten::empty_strided"}}});
  EXPECT_EQ(profile_categories().size(), 9u);
  EXPECT_EQ(profile_categories().back(), "other");
}

}  // namespace
}  // namespace u3d
