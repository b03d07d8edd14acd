// Importers from NIfTI and TIFF into the dataset format v1 (docs/dataset-format.md):
//
//   trainer import nnunet --source Dataset001_Liver --out liver.h5   (nnU-Net v2 raw layout)
//   trainer import nifti --images imgs/ --labels segs/ --out my.h5    (plain folders)
//   trainer import tiff --images imgs/ --labels segs/ --out my.h5     (3D TIFF volumes, below)
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

#include "u3d/io/h5/dataset.h"

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
// imagesTs/<case>_<XXXX><ending> (split 'test', no targets). Region-based labels are refused. A label
// named "ignore" (nnU-Net's convention; it must be the highest value) becomes DatasetInfo::ignore_label
// and is not a class: {"background": 0, "surface": 1, "ignore": 2} -> num_classes 2, ignore_label 2.
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

// 3D TIFF volumes (io/tiff/tiff.h: multi-page, one page per slice along D; uint8, uint16, int16, float32), one
// channel ("image", normalised per case: "zscore"), e.g. the Vesuvius Challenge surface volumes with
// labels 0 background, 1 surface, 2 unlabeled (ignore_label 2). Images and labels are paired by file
// name without its .tif/.tiff ending; every file without a partner is named in one DataError. Classes:
// the largest label value other than the ignore label, plus 1 (at least 2), named background,
// class_1, ...; a label value above the ignore label is refused (the ignore label is the highest, as in
// nnU-Net). uint8 images stay uint8 in the file, integer images that fit int16 become int16, the rest
// int32 (uint16 above 32767) or float32. Labelled cases go to 'train' / 'val'; without labels every case
// goes to 'test' (a dataset to predict; classes background, class_1). Cases are read on `threads`
// threads and written in name order; the output is staged and renamed when complete.
struct TiffImportOptions {
  std::filesystem::path images;                     // folder of <case>.tif / <case>.tiff
  std::filesystem::path labels;                     // folder of label volumes with the images' names; empty: no labels
  std::array<double, 3> spacing = {1.0, 1.0, 1.0};  // mm per voxel along (D, H, W); TIFF stores none
  int64_t ignore_label = -1;                        // label of unlabeled voxels, 2..255; -1: none
  double val_fraction = 0.2;                        // share of labelled cases in split 'val'
  uint64_t seed = 0;                                // which cases go to 'val'
  int64_t threads = 0;                              // 0: every core
  int compression_level = 4;                        // gzip level of the output
  int64_t classes = 0;  // without labels: the classes the dataset declares (the model's, for trainer predict -i); 0: 2
};
// UsageError for a bad option (ignore label, spacing, val fraction); DataError naming the folder, file
// or case for a missing or bad input (read_tiff_volume's errors for a file it cannot read).
ImportSummary import_tiff(const TiffImportOptions& options, const std::filesystem::path& out);

// The normalisation nnU-Net picks for a channel name (see NiftiImportOptions::normalization).
std::string normalization_for_channel_name(const std::string& name);

}  // namespace u3d
