// Built-in phantom data (`trainer synth`): deterministic, learnable stand-ins for the two tasks.
//
// dose:          a body-like ellipsoid "CT" (HU) with a spinal cord inside a vertebra, two parotids and
//                a target (PTV); inputs are the CT and the four structure masks; the target is a smooth
//                dose field (Gy) that is 70 Gy in the PTV, falls off with distance from it, is lower in
//                the organs at risk and zero outside the body; the body is the loss mask.
// segmentation:  one noisy image channel with a smooth bias field; labels 0 background, 1 liver,
//                2 kidney, 3 tumour (inside the liver) (PhantomKind::kOrgans, the default).
// surface:       segmentation of thin sheets, like papyrus in scroll CT (Vesuvius Challenge surface
//                detection; PhantomKind::kSurface): 2-4 smooth curved sheets (height fields with
//                low-frequency sinusoidal bends, each 1-3 voxels thick), each in a random orientation or
//                stacked on the one before (same orientation, touching it where the bends meet), some with
//                a disc cut out; one noisy image channel (sheets brighter, a smooth bias field); labels
//                0 background, 1 surface, 2 unlabeled (the ignore label, DatasetInfo::ignore_label) on one
//                or two random slabs (a band of slices or a box) whatever lies there.
// kits:          KiTS19-like abdominal CT (PhantomKind::kKits): one CT channel "ct" in HU at 1.6 mm
//                isotropic (as the MLPerf 3D U-Net benchmark resamples KiTS19; a native slice
//                thickness of 0.5-5 mm leaves its partial-volume blur along z), labels 0 background,
//                1 kidney, 2 tumour; each case at least `size` per axis and up to 2x (D) and 1.35x
//                (H, W) larger, so the volumes vary in size as the benchmark's do.
// The same (task, kind, size, seed, index) always gives the same case, bit for bit.
#pragma once
#include <filesystem>

#include "u3d/io/h5/dataset.h"

namespace u3d {

// Which segmentation phantom; the dose task has one kind (kOrgans stands for it).
enum class PhantomKind { kOrgans, kSurface, kKits };

struct PhantomOptions {
  Task task = Task::kDose;
  PhantomKind kind = PhantomKind::kOrgans;  // segmentation only; kSurface/kKits with the dose task: UsageError
  int64_t cases = 24;
  Shape3 size = {32, 32, 32};
  uint64_t seed = 0;
  double val_fraction = 0.25;  // share of cases in the "val" split (at least one)
  double test_fraction = 0.0;  // share in "test"; the rest is "train"
};

// kSurface: num_classes 2 {background, surface}, ignore_label 2; kKits: 3 {background, kidney, tumour}.
// UsageError for kDose with kSurface or kKits.
DatasetInfo phantom_info(Task task, PhantomKind kind = PhantomKind::kOrgans);
CaseData make_phantom_case(Task task, const Shape3& size, uint64_t seed, int64_t index,
                           PhantomKind kind = PhantomKind::kOrgans);
// Writes a dataset file (format v1) with splits train / val (/ test).
void write_phantom_dataset(const PhantomOptions& options, const std::filesystem::path& out);
// Writes segmentation phantoms as an nnU-Net v2 raw dataset folder `dir` (NIfTI, for trying the
// import path without real data): dataset.json (channel "phantom", labels background, liver,
// kidney, tumour; for kSurface background, surface and "ignore": 2, nnU-Net's convention),
// imagesTr/<id>_0000.nii.gz and labelsTr/<id>.nii.gz for the train and val cases, and for the test
// cases imagesTs/ plus labelsTs/ (to score predictions). Voxel size from the phantom, axes aligned
// with the world. UsageError for the dose task.
void write_phantom_nnunet_raw(const PhantomOptions& options, const std::filesystem::path& dir);
// Writes segmentation phantoms as a folder of 2D slices in `trainer import images`' layout (the 2D
// slice user's data, docs/slices.md): per case and slice z (1-based) `<id>_<z>.png`, the image as 8-bit
// grey over the case's own range, and `<id>_<z>_mask.png`, its labels 0..K as the mask values. No
// splits: the import draws them. UsageError for the dose task. Written whole or not at all.
void write_phantom_png(const PhantomOptions& options, const std::filesystem::path& dir);

}  // namespace u3d
