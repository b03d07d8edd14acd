// Shared set-up of the test suites, so that a test states only what it varies: random cached cases
// and sampler options for the data tests, small model, data and sliding-window settings, phantom
// options, and trainer runs on a phantom (the CLI runner fixture of the integration and GPU tests).
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/data/cache.h"
#include "u3d/data/sampler.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/synth.h"
#include "u3d/plan/fingerprint.h"
#include "u3d/predict/predictor.h"

namespace u3d::test {

// `count` cases "<prefix><i>" drawn from torch's CPU generator seeded with `seed`: even cases are
// `shape` (D, H, W), odd ones 2 deeper; image (2, D, H, W): channel 0 integers 0..8 (a uint8 field
// in the cache), channel 1 N(0, 1); mask (1, D, H, W) uint8, 1 on about 70% of the voxels; target
// (1, D, H, W) U[0, 1), or with `labels` > 0 (D, H, W) uint8 labels 0..labels-1 where, when
// `top_label_ignored`, labels-1 becomes 255 (the ignore label).
std::vector<CachedCase> random_cases(const std::string& prefix, int64_t count, const Shape3& shape, uint64_t seed,
                                     int64_t labels = 0, bool top_label_ignored = false);

// Patches of `patch`, `batch_size` a batch, `seed`; flips and 90-degree rotations each with
// probability 0.5; every other augmentation off.
SamplerOptions flip_rot_sampler(const Shape3& patch, int64_t batch_size, uint64_t seed);
// Elastic deformation on `o` with probability `prob`, `magnitude` voxels, a `grid`^3 control grid.
void set_elastic(SamplerOptions& o, double prob, double magnitude, int64_t grid);

// The OpenKBP-like dose phantom's data section: CT clipped to [-1000, 1000], the four masks as
// they are, dose / 70.
DataConfig dose_data();

// A segmentation fingerprint without a dataset (the planner's input): one CT channel (mean 80, std
// 40, P0.5 -900, P99.5 1500), 3 classes, a train split of one case of `shape` per entry of `spacings`.
DatasetFingerprint synthetic_fingerprint(const Shape3& shape, const std::vector<std::array<double, 3>>& spacings);

// A U-Net of `levels` levels and `base_filters` filters; every other key at its default.
ModelConfig unet_config(int64_t levels, int64_t base_filters = 4);

// Sliding windows of `patch`, `batch_size` a forward pass, mirrored test-time augmentation when
// `mirror`; the rest at the defaults.
SlidingWindowOptions window(const Shape3& patch, int64_t batch_size, bool mirror = false);

// A segmentation dataset's description: channels `channel_names`, the classes `class_names`.
DatasetInfo segmentation_info(const std::vector<std::string>& channel_names,
                              const std::vector<std::string>& class_names);

// A surface phantom (segmentation, PhantomKind::kSurface) of `cases` cases of size^3.
PhantomOptions surface_phantom(int64_t cases, int64_t size);

// A dose phantom dir/p.h5 of `cases` cases of size^3, and for each name the tiny config
// dir/<name>.yaml on it (tiny_config).
void phantom_with_configs(const TempDir& dir, int64_t cases, int64_t size, const std::vector<std::string>& names);

// The CLI runner fixture: a temporary folder holding a dose phantom p.h5 (`cases` cases of 16^3),
// the trainer run in it, and training runs under a tiny config of their own.
class PhantomCli : public ::testing::Test {
 protected:
  explicit PhantomCli(int64_t cases = 8) : cases_(cases) {}
  void SetUp() override { make_phantom(dir / "p.h5", Task::kDose, cases_, 16); }
  CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  // Writes <name>.yaml (tiny_config on p.h5) and runs `--config <name>.yaml` with `extra`.
  CommandResult train(const std::string& name, const std::vector<std::string>& extra);
  // Writes <name>.yaml (tiny_config on p.h5) and returns its file name.
  std::string config(const std::string& name);
  TempDir dir;

 private:
  int64_t cases_;
};

// The GPU tests' fixture: skips the test where no CUDA device is present; a temporary folder `dir`
// for a phantom (phantom_with_configs) and the trainer runs in it.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  void phantom(int64_t cases, int64_t size, const std::vector<std::string>& names) {
    phantom_with_configs(dir, cases, size, names);
  }
  CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  TempDir dir;
};

}  // namespace u3d::test
