// A dataset's fingerprint (nnU-Net's "dataset fingerprint"): what the planner (plan/planner.h)
// needs to know about a dataset file, gathered in one pass over its cases and kept beside it.
//
//   DatasetReader reader("data/liver.h5");
//   DatasetFingerprint fp = load_or_compute_fingerprint("data/liver.h5", reader, /*threads=*/0);
//   std::cout << fingerprint_table(fp);
//
// Shapes are (D, H, W) voxels, spacings (D, H, W) in mm, intensities in the raw units stored in
// the file (e.g. HU). Intensity statistics are taken over FOREGROUND voxels (segmentation: label
// > 0; dose: loss mask > 0 or target > 0; a case with neither: every voxel) by nnU-Net's rule, the
// importers' too (core/intensity_sample.h: 1e8 / cases draws per case, every case weighing the same;
// the same voxels for every channel): mean, standard deviation (population) and the 0.5 / 99.5
// percentiles (numpy's linear convention) over the pooled samples of all cases. Segmentation: voxels holding the
// dataset's ignore label (DatasetInfo::ignore_label, unlabelled voxels) are neither a class nor foreground; a case
// without labels (e.g. an nnU-Net imagesTs case) counts for shapes, spacings and the channels' min / max only (its
// foreground is unknown).
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {

inline constexpr int64_t kFingerprintVersion = 4;  // bumped when the fields or their meaning change (4: no test cases)

struct CaseFingerprint {
  std::string id;
  Shape3 shape{};                   // (D, H, W) voxels
  std::array<double, 3> spacing{};  // (D, H, W) mm
};

struct ChannelFingerprint {
  std::string name;
  double mean = 0, std = 0;     // over the foreground sample
  double p00_5 = 0, p99_5 = 0;  // 0.5 and 99.5 percentiles of the foreground sample
  double min = 0, max = 0;      // over every voxel of every case
  bool binary = false;          // every voxel is 0 or 1 (a structure mask)
  int64_t samples = 0;          // values in the pooled sample (each weighted, core/intensity_sample.h)
};

struct DatasetFingerprint {
  Task task = Task::kSegmentation;
  std::vector<std::string> channel_names;
  std::vector<CaseFingerprint> cases;  // in the order of the ids given
  std::vector<ChannelFingerprint> channels;
  std::map<std::string, int64_t> splits;  // split name -> its cases fingerprinted (split_counts; none: absent)

  // Segmentation.
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
  std::vector<double> class_frequency;    // per class (background included): share of all labelled voxels
  int64_t ignore_label = -1;              // the dataset's ignore label; -1: none
  double ignored_share = 0;               // ignore-label voxels / voxels of the labelled cases
  int64_t unlabelled_cases = 0;           // cases without labels (not in the label and intensity statistics)
  int64_t smallest_structure_voxels = 0;  // smallest non-zero per-case voxel count of any class > 0; 0: none
  // Dose (regression).
  double target_min = 0, target_max = 0;  // over every voxel of cases with a target
  double mask_share = 1.0;                // loss-mask voxels / all voxels (a case without a mask: all); 1: no mask

  Shape3 median_shape{};                   // per-axis median over the cases
  std::array<double, 3> median_spacing{};  // per-axis median over the cases, mm
  int64_t total_voxels = 0;                // sum over the cases

  // Staleness key: the dataset file's size in bytes and modification time (Unix time in ns, stat(2)).
  int64_t source_size = -1;
  int64_t source_mtime_ns = 0;
  int64_t version = kFingerprintVersion;
};

// Reads the cases `ids` of `reader` on up to `threads` threads (0: every core), one case per thread
// at a time. The key (source_size, source_mtime_ns) is left unset. DataError naming the case for a
// label outside [0, num_classes) that is not the ignore label (DatasetReader::read_case's check);
// DataError when no case of a segmentation dataset has labels.
DatasetFingerprint compute_fingerprint(const DatasetReader& reader, const std::vector<std::string>& ids,
                                       int64_t threads);

// The cases a plan may look at: every case of the dataset but those of its split "test" (the cases
// a model is scored on, nnU-Net's imagesTs), in the file's order. Planning never reads test cases:
// the stored fingerprint, its statistics and every decision of `trainer plan` come from these
// (nnU-Net plans from imagesTr alone). DataError naming the file when only test cases remain.
std::vector<std::string> planning_case_ids(const DatasetReader& reader);

// DatasetFingerprint::splits of a fingerprint over `ids`: per split of `info`, how many of its cases
// are among `ids` (splits with none left out).
std::map<std::string, int64_t> split_counts(const DatasetInfo& info, const std::vector<std::string>& ids);

// JSON text of every field (core/json.h: a member per line, shortest round-trip numbers, NaN as
// null), and back. fingerprint_from_json: DataError naming `source` for text that is not a fingerprint.
// check_fingerprint: DataError naming `source` and the field when a fingerprint does not describe the
// dataset `reader` holds (other case ids, shapes, spacings, channels or classes than the file's; a
// shape below 1 voxel, a spacing that is not a positive finite number, a statistic that is not
// finite or out of order, a share outside [0, 1]): a tampered or foreign file.
std::string to_json(const DatasetFingerprint& fp);
DatasetFingerprint fingerprint_from_json(const std::string& json, const std::string& source);
void check_fingerprint(const DatasetFingerprint& fp, const DatasetReader& reader, const std::string& source);

// <dataset>.fingerprint.json
std::filesystem::path fingerprint_path(const std::filesystem::path& dataset);
// The stored fingerprint when its version and key match `dataset`'s size and modification time and
// check_fingerprint() finds it true to the file (else a warning naming the field); otherwise computed over every case
// of `reader` and stored with write_file_atomic (a folder that cannot be written only logs a warning). `computed`, when
// given, says whether it was computed.
// Over planning_case_ids(reader).
DatasetFingerprint load_or_compute_fingerprint(const std::filesystem::path& dataset, const DatasetReader& reader,
                                               int64_t threads, bool* computed = nullptr);

// A plain-text table: cases, median shape and shape range, spacing range, per channel statistics,
// classes and their frequencies or the target range and mask share.
std::string fingerprint_table(const DatasetFingerprint& fp);

}  // namespace u3d
