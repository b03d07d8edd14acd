// Built-in phantom data (`trainer synth`): deterministic, learnable stand-ins for the two tasks.
//
// dose:          a body-like ellipsoid "CT" (HU) with a spinal cord inside a vertebra, two parotids and
//                a target (PTV); inputs are the CT and the four structure masks; the target is a smooth
//                dose field (Gy) that is 70 Gy in the PTV, falls off with distance from it, is lower in
//                the organs at risk and zero outside the body; the body is the loss mask.
// segmentation:  one noisy image channel with a smooth bias field; labels 0 background, 1 liver,
//                2 kidney, 3 tumour (inside the liver).
// The same (task, size, seed, index) always gives the same case, bit for bit.
#pragma once
#include <filesystem>

#include "u3d/io/dataset.h"

namespace u3d {

struct PhantomOptions {
  Task task = Task::kDose;
  int64_t cases = 24;
  Shape3 size = {32, 32, 32};
  uint64_t seed = 0;
  double val_fraction = 0.25;  // share of cases in the "val" split (at least one)
  double test_fraction = 0.0;  // share in "test"; the rest is "train"
};

DatasetInfo phantom_info(Task task);
CaseData make_phantom_case(Task task, const Shape3& size, uint64_t seed, int64_t index);
// Writes a dataset file (format v1) with splits train / val (/ test).
void write_phantom_dataset(const PhantomOptions& options, const std::filesystem::path& out);
// Writes segmentation phantoms as an nnU-Net v2 raw dataset folder `dir` (NIfTI, for trying the
// import path without real data): dataset.json (channel "phantom", labels background, liver,
// kidney, tumour), imagesTr/<id>_0000.nii.gz and labelsTr/<id>.nii.gz for the train and val
// cases, and for the test cases imagesTs/ plus labelsTs/ (to score predictions). Voxel size from the
// phantom, axes aligned with the world. UsageError for the dose task.
void write_phantom_nnunet_raw(const PhantomOptions& options, const std::filesystem::path& dir);

}  // namespace u3d
