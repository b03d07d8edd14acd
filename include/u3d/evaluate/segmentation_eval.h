// Segmentation evaluation: per-class Dice and 95th-percentile Hausdorff distance in mm.
//
//   trainer evaluate segmentation --reference Dataset001/labelsTr --predictions runs/x/predictions/val
//     --only-predicted   (one command line; labelsTr holds the training cases too)
//
// Definitions (as MONAI's compute_hausdorff_distance(percentile=95) and the BraTS evaluation):
// the surface of a mask is its voxels with a face neighbour outside it (the volume border counts
// as outside); the distance of a surface voxel to the other mask is the Euclidean distance in mm
// (voxel spacing applied) to the nearest surface voxel of the other mask; HD95 is the larger of
// the two directed 95th percentiles (numpy's linear interpolation). Dice = 2|A & B| / (|A| + |B|).
// A class absent from both volumes gives NaN for both (left out of means); a class in only one
// gives Dice 0 and HD95 +inf (reported as "inf", left out of the HD95 mean, counted apart).
#pragma once
#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "u3d/data/distance_transform.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {

// Surface voxels of a (D, H, W) bool mask.
torch::Tensor surface_voxels(const torch::Tensor& mask);
// distance_transform: u3d/data/distance_transform.h

double dice_score(const torch::Tensor& a, const torch::Tensor& b);
double hausdorff95(const torch::Tensor& a, const torch::Tensor& b, const std::array<double, 3>& spacing);

struct ClassScore {
  double dice = 0;
  double hd95 = 0;  // mm
};

struct CaseEvaluation {
  std::string id;
  std::vector<ClassScore> scores;  // one per evaluated label
};

struct SegmentationEvaluation {
  std::vector<int64_t> labels;     // evaluated label values (foreground)
  std::vector<std::string> names;  // one per label
  std::vector<CaseEvaluation> cases;
  // Mean over cases of each label's Dice and HD95 (finite values only) and how many HD95 were inf.
  std::vector<double> mean_dice, mean_hd95;
  std::vector<int64_t> infinite_hd95;
};

// Where `labels` (any dtype) equals `value`, bool; none where the dtype cannot hold `value` (never
// `labels == value` on uint8, which compares 258 as 2).
torch::Tensor label_equals(const torch::Tensor& labels, int64_t value);

// Scores of `pred` against `ref` (both (D, H, W) integer labels) for each label in `labels`.
CaseEvaluation evaluate_case(const torch::Tensor& pred, const torch::Tensor& ref, const std::vector<int64_t>& labels,
                             const std::array<double, 3>& spacing);

struct SegmentationEvalOptions {
  std::filesystem::path reference;    // <case>.nii(.gz) or <case>.tif(f) label files
  std::filesystem::path predictions;  // predicted label files in either format, matched by case id
  std::vector<int64_t> labels;        // empty: every foreground value found in either folder
  std::vector<std::string> names;     // label names; empty: dataset.json beside the reference folder, else label_<v>
  int64_t threads = 0;                // 0: every core
  bool only_predicted = false;        // score the predicted cases alone (else every reference case needs one)
};

// A prediction file and the reference file of the same case id (file name without .nii.gz/.nii/.tif/
// .tiff). Label files are NIfTI or 3D TIFF (io/tiff/tiff.h: pages along D); TIFF holds no voxel size, so
// a TIFF volume's spacing is the other file's, or 1 (distances in voxels) when both are TIFF.
struct LabelPair {
  std::string id;
  std::filesystem::path prediction, reference;
};
// Every prediction in `predictions` with its reference in `reference`, by case id. UsageError for a
// missing folder; DataError for no predictions, two files of one case in a folder, a prediction
// without a reference, or (unless `only_predicted`, which logs them) reference cases without a
// prediction, naming them: a mean over some of the cases is never given as the mean over all.
std::vector<LabelPair> match_label_files(const std::filesystem::path& reference,
                                         const std::filesystem::path& predictions, bool only_predicted);
// Reads a pair into `p` and `r` ((D, H, W) label volumes with their geometry). DataError naming the
// file for different dims or voxel sizes, non-integer or negative values, or an unreadable file.
void read_label_pair(const LabelPair& pair, NiftiVolume& p, NiftiVolume& r);

// Evaluates every prediction file against the reference of the same case id. DataError naming the
// file for a prediction without a reference, different dims or voxel sizes, or unreadable files.
SegmentationEvaluation evaluate_segmentation_folders(const SegmentationEvalOptions& options);

// CSV: case,label,name,dice,hd95_mm per case and label, then "mean" rows per label and label "all".
std::string evaluation_csv(const SegmentationEvaluation& e);
// A fixed-width table: one row per case, Dice and HD95 per label, and the means.
std::string evaluation_table(const SegmentationEvaluation& e);

}  // namespace u3d
