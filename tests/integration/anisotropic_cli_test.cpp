// Per-axis kernels and strides (model.kernel_sizes, model.strides; issue 39) through the real
// binary: a thick-slice network trains with deep supervision on a patch only its strides allow,
// and the run predicts from its checkpoint.
#include <gtest/gtest.h>

#include "test_support.h"

namespace u3d {
namespace {

TEST(AnisotropicCli, ThickSliceNetworkTrainsAndPredicts) {
  test::TempDir dir;
  test::make_phantom(dir / "s.h5", Task::kSegmentation, 4, 16);
  // D is halved once (divisor 2), H and W twice (4): a patch 6 deep, which 2^(levels - 1) = 4 refuses.
  test::write_text(dir / "a.yaml",
                   "experiment:\n  name: a\n  seed: 7\n"
                   "data:\n  path: s.h5\n  batch_size: 2\n  patch_size: [6, 16, 16]\n"
                   "  normalize: [zscore]\n"
                   "model:\n  levels: 3\n  base_filters: 4\n  deep_supervision: true\n"
                   "  kernel_sizes: [[1, 3, 3], [3, 3, 3], [3, 3, 3]]\n"
                   "  strides: [[1, 1, 1], [1, 2, 2], [2, 2, 2]]\n"
                   "training:\n  epochs: 1\n  steps_per_epoch: 2\n  optimizer: sgd\n  lr: 0.01\n"
                   "  threads: 1\n  deterministic: true\n  device: cpu\n"
                   "logging:\n  progress_seconds: 0\n");
  test::CommandResult r = test::run_trainer({"--config", "a.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "runs" / "a";
  const std::string stored = test::read_text(run / "config.yaml");
  EXPECT_NE(stored.find("strides: [[1, 1, 1], [1, 2, 2], [2, 2, 2]]"), std::string::npos) << stored;
  r = test::run_trainer({"--config", "a.yaml", "--predict-only"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run / "predictions")) << r.output;

  // Without the strides the same patch is refused with one line naming the key.
  r = test::run_trainer({"--config", "a.yaml", "--set", "model.strides=[]", "--set", "experiment.name=b"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.patch_size: [6, 16, 16] must divide by [4, 4, 4]"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace u3d
