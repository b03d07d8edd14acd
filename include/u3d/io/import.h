// Importers from NIfTI into the dataset format v1 (docs/dataset-format.md):
//
//   trainer import nnunet --source Dataset001_Liver --out liver.h5   (nnU-Net v2 raw layout)
//   trainer import nifti --images imgs/ --labels segs/ --out my.h5    (plain folders)
//
// Every case keeps its NIfTI geometry (SourceGeometry: shape, spacing, qform/sform, units, files),
// so predictions are written back as NIfTI with the input's header. Each case is checked, and every
// failure names the file: channels or label with another shape, spacing or affine than the first
// channel; label values not declared (dataset.json or --classes); non-integer labels; NaN or Inf
// voxels; unreadable or truncated files; missing channel files. Cases are read, checked and
// resampled on all cores; the output is written under a temporary name and renamed when complete.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "u3d/io/dataset.h"

namespace u3d {

struct NiftiImportOptions {
  // Resample every case to this voxel size (mm along D, H, W = NIfTI z, y, x): images trilinearly,
  // labels by nearest neighbour. Predictions are resampled back to each case's own grid.
  std::optional<std::array<double, 3>> spacing;
  // Per channel (one entry: all) normalisation recorded in the file for data.normalize = dataset:
  // ct (clip to the 0.5 / 99.5 percentiles of the foreground voxels of all labelled cases, then
  // z-score with their mean and std: nnU-Net's CT scheme) | zscore (per case, nnU-Net's default) |
  // minmax | none | any data.normalize spec. Empty: from the channel names as nnU-Net does ("CT" ->
  // ct, "noNorm" -> none, "rescale_to_0_1" -> minmax, "rgb_to_0_1" -> scale:255, else zscore).
  std::vector<std::string> normalization;
  double val_fraction = 0.2;  // share of labelled cases in split 'val' (the rest: 'train')
  uint64_t seed = 0;          // which cases go to 'val'
  int64_t threads = 0;        // 0: every core
  int compression_level = 4;  // gzip level of the output
};

struct ImportSummary {
  int64_t train = 0, val = 0, test = 0;
  std::vector<std::string> channel_normalization;  // what was recorded per channel
  int64_t resampled = 0;                           // cases whose grid changed
};

// nnU-Net v2 raw layout: dataset.json (channel_names or modality, labels name -> value, file_ending,
// default .nii.gz), imagesTr/<case>_<XXXX><ending> per channel, labelsTr/<case><ending>, optional
// imagesTs/<case>_<XXXX><ending> (split 'test', no targets). Region-based labels are refused.
ImportSummary import_nnunet(const std::filesystem::path& source, const std::filesystem::path& out,
                            const NiftiImportOptions& options);

struct NiftiFolders {
  std::filesystem::path images;  // *.nii / *.nii.gz
  std::filesystem::path labels;  // <case>.nii(.gz); empty: no labels (every case goes to 'test')
  // Channels by file-name suffix, e.g. {"_0000", "_0001"}: <case><suffix>.nii.gz; empty: one
  // channel per case, the case id is the file name without its ending.
  std::vector<std::string> channel_suffixes;
  std::vector<std::string> channel_names;  // default: "image" (one channel) or channel_<i>
  // Class names, background first (declares labels 0..K-1). Empty: K = largest label found + 1.
  std::vector<std::string> class_names;
};
ImportSummary import_nifti_folders(const NiftiFolders& folders, const std::filesystem::path& out,
                                   const NiftiImportOptions& options);

// The normalisation nnU-Net picks for a channel name (see NiftiImportOptions::normalization).
std::string normalization_for_channel_name(const std::string& name);

}  // namespace u3d
