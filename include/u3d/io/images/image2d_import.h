// `trainer import images`: folders of 2D PNG or TIFF slices into the dataset format v1 (docs/slices.md).
//
//   trainer import images --images kaggle_3m/ --out lgg.h5 --test-fraction 0.2
//     TCGA_CS_4941_19960909_1.png ... _23.png + TCGA_CS_4941_19960909_1_mask.png ...
//     -> case TCGA_CS_4941_19960909: (23, 256, 256), slices in natural order of their names
//
// Masks are paired by name: <stem><mask_suffix>.<ext> (the Kaggle LGG layout, masks beside the images)
// or <stem>.<ext> in a separate --labels folder. Slices are grouped into cases (one patient each) by
// a pattern on the file stem: by default the name up to its last '_' or '-' digit run
// (^(.*)[_-][0-9]+$; a name without one is a case of its own), or --group REGEX's one capture group.
// One case = its slices sorted by natural order of their names (slice 2 before slice 10), stacked
// into (S, H, W); every slice of a case has the same size. Splits are drawn per case, so no patient
// has slices on both sides. Mask values {0, 255} become labels {0, 1}; other masks' values 0..K are the
// labels themselves (classes 0..K); the mapping is logged on one line. Images are stored as read
// (uint8 stays uint8, 16-bit as int16 when it fits, else int32), normalised per case (zscore), voxel
// size 1 x 1 x 1 (PNG records none). Each case keeps its slices' files as its source geometry
// (format "slices": source_files = the S image files in slice order, then the S mask files), so
// `--predict-only` writes one PNG mask per slice (predict/prediction_output.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "u3d/io/import.h"

namespace u3d {

struct ImagesImportOptions {
  std::filesystem::path images;         // folder of *.png / *.tif / *.tiff slices
  std::filesystem::path labels;         // folder of masks; empty: the images folder (masks beside the images)
  std::string mask_suffix = "_mask";    // a mask's stem is the image's stem plus this (or the same stem in --labels)
  std::string group;                    // ECMAScript regex with one capture group: the case of a slice; "": default
  bool skip_unpaired = false;           // leave an image without mask / a mask without image out (one warning)
  double val_fraction = 0.2;            // share of the cases in split 'val'
  double test_fraction = 0.0;           // share of the cases in split 'test' (labelled: scored on prediction)
  uint64_t seed = 0;                    // which cases go to 'val' and 'test'
  std::filesystem::path reference_out;  // also write each case's labels as <dir>/<case>.tif; empty: none
  int64_t threads = 0;                  // 0: every core
  int compression_level = 4;            // gzip level of the output
  // > 0: images only, for prediction (trainer predict -i, app/commands.h): no mask is read (files
  // named *<mask_suffix>.* are left out), the dataset declares this many classes (the model's), every
  // case goes to split 'test', and cases carry no labels.
  int64_t unlabelled_classes = 0;
};

// The case a slice belongs to: `pattern`'s first capture group on its stem, or (empty pattern) the
// default rule above. std::nullopt when a given pattern does not match.
std::optional<std::string> slice_case(const std::string& stem, const std::string& pattern);
// Natural order of names: digit runs compare as numbers ("s_2" < "s_10"), the rest as text.
bool natural_less(const std::string& a, const std::string& b);

// UsageError for a bad option (fractions, a --group without one capture group); DataError naming the
// file(s) for a missing partner (unless skip_unpaired), slices of one case of different sizes, mask
// values that are neither {0, 255} nor 0..K, an unreadable or unsupported file, a case name that is not
// a valid case id.
ImportSummary import_images(const ImagesImportOptions& options, const std::filesystem::path& out);

}  // namespace u3d
