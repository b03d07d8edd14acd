// 2D U-Nets on slices from a 3D dataset file (model.dims 2, issue 37), through the CLI: raw NIfTI
// written by nifticlib, imported, trained slice by slice on the CPU (an epoch = every training slice
// once), predicted slice by slice into volumes with each input's geometry (predict -c and predict -i),
// and scored by `trainer evaluate segmentation`.
#include <gtest/gtest.h>

#include <sstream>

#include "nifti_support.h"
#include "test_support.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

TEST(SlicesCli, TrainsOnSlicesOfVolumesAndPredictsWholeVolumesWithTheirGeometry) {
  test::TempDir dir;
  const Shape3 shape{12, 24, 20};  // D slices of 24 x 20
  const fs::path raw = test::make_nnunet_raw(dir.path(), 6, shape, /*test_cases=*/2);
  auto r = test::run_trainer(
      {"import", "nnunet", "--source", raw.string(), "--out", "seg.h5", "--val-fraction", "0.34"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ostringstream yaml;
  yaml << "experiment: {name: s2d, seed: 3}\n"
       << "data: {path: seg.h5, batch_size: 8, patch_size: [1, 24, 20], normalize: [dataset]}\n"
       << "augment: {flip_axes: [2], affine_prob: 0.5, affine_rotation: [20, 0, 0]}\n"
       << "model: {preset: unet2d, levels: 3, base_filters: 4}\n"
       << "training: {epochs: 2, lr: 0.01, threads: 1, device: cpu, val_patch_batches: 1}\n"
       << "predict: {split: test, tta: flips}\nlogging: {progress_seconds: 0}\n";
  test::write_text(dir / "s2d.yaml", yaml.str());
  r = test::run_trainer({"train", "-c", "s2d.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 4 training cases x 12 slices / batch 8 = 6 steps per epoch (cases alone would make 1).
  EXPECT_NE(r.output.find("6 steps per epoch of 8 samples"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2"), std::string::npos) << r.output;

  r = test::run_trainer({"predict", "-c", "s2d.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path out = dir / "runs" / "s2d" / "predictions" / "test";
  for (const std::string id : {"case_006", "case_007"}) {
    const auto pred = read_nifti(out / (id + ".nii.gz")).data;
    EXPECT_EQ(pred.sizes(), (torch::IntArrayRef{shape[0], shape[1], shape[2]})) << id;
    test::expect_same_label_geometry(raw / "imagesTs" / (id + "_0000.nii.gz"), out / (id + ".nii.gz"));
  }
  r = test::run_trainer({"predict", "-i", (raw / "imagesTs").string(), "-o", "raw_out", "--run", "runs/s2d"},
                        dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string id : {"case_006", "case_007"}) {
    EXPECT_TRUE(
        torch::equal(read_nifti(dir / "raw_out" / (id + ".nii.gz")).data, read_nifti(out / (id + ".nii.gz")).data))
        << id;
  }
  // The validation cases, against their label files.
  r = test::run_trainer({"predict", "-c", "s2d.yaml", "--set", "predict.split=val"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_trainer({"evaluate", "segmentation", "--reference", (raw / "labelsTr").string(), "--predictions",
                         (dir / "runs" / "s2d" / "predictions" / "val").string(), "--only-predicted"},
                        dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evaluate: 2 cases"), std::string::npos) << r.output;
}

TEST(SlicesCli, APatchThatIsNotASliceIsAOneLineConfigError) {
  test::TempDir dir;
  test::write_text(dir / "bad.yaml", "data: {path: x.h5, patch_size: [2, 32, 32]}\nmodel: {dims: 2, levels: 2}\n");
  const auto r = test::run_trainer({"train", "-c", "bad.yaml"}, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("data.patch_size: [2, 32, 32] must be 1 on data.slice_axis 0 for model.dims 2"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace u3d
