// The profile's categories (app/step_profile.h): operator and kernel names to categories.
#include <gtest/gtest.h>

#include "u3d/app/step_profile.h"

namespace u3d {
namespace {

TEST(StepProfile, OperatorsAndKernelsFallIntoTheirCategories) {
  EXPECT_EQ(op_category("aten::cudnn_convolution"), "convolution");
  EXPECT_EQ(op_category("aten::convolution_backward"), "convolution");
  EXPECT_EQ(op_category("aten::addmm"), "convolution");
  EXPECT_EQ(op_category("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32"), "convolution");
  EXPECT_EQ(op_category("aten::native_batch_norm"), "normalisation");
  EXPECT_EQ(op_category("NativeBatchNormBackward0"), "normalisation");
  EXPECT_EQ(op_category("aten::native_group_norm"), "normalisation");
  EXPECT_EQ(op_category("aten::leaky_relu"), "activation");
  EXPECT_EQ(op_category("aten::threshold_backward"), "activation");
  EXPECT_EQ(op_category("aten::copy_"), "copy/cast");
  EXPECT_EQ(op_category("aten::to"), "copy/cast");
  EXPECT_EQ(op_category("aten::_to_copy"), "copy/cast");
  EXPECT_EQ(op_category("Memcpy DtoD (Device -> Device)"), "copy/cast");
  EXPECT_EQ(op_category("aten::sum"), "reduction");
  EXPECT_EQ(op_category("aten::linalg_vector_norm"), "reduction");  // not a normalisation
  EXPECT_EQ(op_category("aten::max"), "reduction");
  EXPECT_EQ(op_category("aten::_fused_adamw_"), "optimizer");
  EXPECT_EQ(op_category("aten::_foreach_norm"), "optimizer");  // the gradient norm, with clipping
  EXPECT_EQ(op_category("aten::_amp_foreach_non_finite_check_and_unscale_"), "optimizer");
  EXPECT_EQ(op_category("aten::add_"), "elementwise");
  EXPECT_EQ(op_category("aten::mul"), "elementwise");
  EXPECT_EQ(op_category("aten::where"), "elementwise");
  EXPECT_EQ(op_category("aten::eq"), "elementwise");
  EXPECT_EQ(op_category("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"),
            "elementwise");
  EXPECT_EQ(op_category("aten::max_pool3d"), "other");
  EXPECT_EQ(op_category("aten::empty_strided"), "other");
  EXPECT_EQ(profile_categories().size(), 8u);
  EXPECT_EQ(profile_categories().back(), "other");
}

}  // namespace
}  // namespace u3d
