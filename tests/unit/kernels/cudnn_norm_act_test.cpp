// kernels/cudnn_norm_act.h on a machine without a GPU: cuDNN's graphs are compiled in wherever the
// CUDA kernels are (scripts/setup.sh installs cudnn-frontend's headers, so CI and the bundle have them),
// they find LibTorch's cuDNN at run time without linking it, and without a GPU they refuse in one line.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "u3d/core/errors.h"
#include "u3d/kernels/cudnn_norm_act.h"

namespace u3d {
namespace {

TEST(CudnnGraphsBuild, CompiledWhereverTheKernelsAre) {
#if U3D_TEST_EXPECT_CUDA_KERNELS
  EXPECT_TRUE(kernels::cudnn_graphs_built())
      << "the CUDA kernels are built but cuDNN's graphs are not: cudnn-frontend's headers were not found "
         "(scripts/setup.sh installs nvidia-cudnn-frontend into the torch venv)";
#endif
  EXPECT_EQ(kernels::cudnn_graphs_built(), static_cast<bool>(U3D_TEST_EXPECT_CUDNN_GRAPHS));
}

TEST(CudnnGraphsBuild, FindLibTorchsCudnnAtRunTime) {
  if (!kernels::cudnn_graphs_built()) GTEST_SKIP() << "no cuDNN graphs in this build";
  // cudnnGetVersion through the frontend's dynamic loading: the library LibTorch loaded, no GPU needed.
  const std::string version = kernels::cudnn_graphs_runtime();
  std::printf("cuDNN at run time: %s\n", version.c_str());
  EXPECT_TRUE(std::regex_match(version, std::regex(R"(9\.\d+\.\d+)"))) << version;
}

TEST(CudnnGraphsBuild, RefuseWithoutAGpuInOneLine) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU (tests/gpu/cudnn_norm_act_test.cpp)";
  kernels::CudnnNormActSpec spec;
  spec.shape = {2, 8, 1, 4, 4};
  try {
    kernels::CudnnNormAct graphs(spec);
    FAIL() << "cuDNN graphs were built without a GPU";
  } catch (const TrainingError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cuDNN graph: ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace u3d
