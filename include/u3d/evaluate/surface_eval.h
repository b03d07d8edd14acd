// `trainer evaluate surface`: the surface-detection metrics (evaluate/surface_metrics.h) of every
// predicted label file against the reference of the same case, per case and mean.
//
//   trainer evaluate surface --reference labels/ --predictions runs/x/predictions/val [--tolerance 2]
//
// Files are NIfTI or 3D TIFF label volumes matched by case id as `evaluate segmentation` matches
// them (segmentation_eval.h): predictions hold 0/1, references 0/1 and the ignore label, checked in
// the files' own value type (256 or -1 is refused as such, never wrapped into 0..255).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "u3d/evaluate/surface_metrics.h"

namespace u3d {

struct SurfaceEvalOptions {
  std::filesystem::path reference;          // <case>.nii(.gz) or .tif(f) references: 0, 1, ignore_label
  std::filesystem::path predictions;        // <case>.nii(.gz) or .tif(f) predictions: 0, 1
  double tolerance = 2.0;                   // Surface Dice tolerance, voxels
  std::optional<int64_t> ignore_label = 2;  // reference voxels excluded from every metric; nullopt: none
  int64_t threads = 0;                      // cases scored at once; 0: every core
  bool only_predicted = false;              // as SegmentationEvalOptions::only_predicted
};

struct SurfaceCaseScores {
  std::string id;
  SurfaceScores scores;
};

struct SurfaceEvaluation {
  std::vector<SurfaceCaseScores> cases;  // by case id
  SurfaceScores mean;                    // mean of every score over the cases (Betti numbers: left 0)
};

// DataError naming the file for a value outside {0, 1} in a prediction (outside {0, 1, ignore} in a
// reference), different dims or voxel sizes, or an unreadable file; as match_label_files otherwise
// (a reference case without a prediction is refused unless only_predicted).
SurfaceEvaluation evaluate_surface_folders(const SurfaceEvalOptions& options);
// CSV: case,surface_dice,voi_split,voi_merge,voi,voi_score,b0_pred,b1_pred,b2_pred,b0_ref,b1_ref,
// b2_ref,topo_score,total per case, then a "mean" row (Betti columns empty).
std::string surface_evaluation_csv(const SurfaceEvaluation& e);
// A fixed-width table of the same, for the console.
std::string surface_evaluation_table(const SurfaceEvaluation& e);

}  // namespace u3d
