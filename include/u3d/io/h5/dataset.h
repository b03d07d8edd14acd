// Dataset format v1: one HDF5 file holds a dataset's cases, its splits and its metadata.
// The layout is documented in docs/dataset-format.md (with an h5py example); in short:
//
//   /                        attrs: format="u3d-dataset", format_version=1, task="dose"|"segmentation",
//                                   channel_names[C], target_name, target_units, num_classes,
//                                   class_names[num_classes], optional ignore_label
//   /cases/<id>/image        (C, D, H, W) any int/float type; raw values, normalised at load time
//   /cases/<id>/target       (D, H, W) float (regression, e.g. dose in Gy) or integer labels; optional
//   /cases/<id>/mask         (D, H, W) uint8 loss mask (e.g. OpenKBP possible-dose mask); optional
//   /cases/<id>              attr spacing = [sD, sH, sW] in mm; optional source_* attrs (SourceGeometry)
//   /splits/<name>           1-D strings: case ids (train, val, test, ...)
//   /                        optional attr channel_normalization[C] (data.normalize specs chosen at import)
#pragma once
#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {
namespace h5 {
class StagedFile;
}
struct PreparedCase;

enum class Task { kDose, kSegmentation };  // kDose: any voxel-wise regression target
std::string to_string(Task t);
Task task_from_string(const std::string& s);  // DataError for anything else

inline constexpr int kDatasetFormatVersion = 1;

struct DatasetInfo {
  Task task = Task::kDose;
  std::vector<std::string> channel_names;  // C input channels, in storage order
  std::string target_name = "target";      // e.g. "dose"
  std::string target_units;                // e.g. "Gy"
  int64_t num_classes = 0;                 // segmentation: classes including background (0)
  std::vector<std::string> class_names;    // segmentation: num_classes names
  // Segmentation: the label of unlabeled voxels (e.g. 2 in the Vesuvius surface data), >= num_classes
  // (nnU-Net: the highest label); excluded from every loss, the pseudo-Dice and every metric, voxel by
  // voxel. -1: none. The network predicts num_classes classes; the ignore label is never predicted.
  int64_t ignore_label = -1;
  std::map<std::string, std::vector<std::string>> splits;  // split name -> case ids
  std::vector<std::string> case_ids;                       // every case in the file, sorted
  std::string description;                                 // free text
  // Optional, per channel: the normalisation the importer chose (a data.normalize spec such as
  // "ct:-1017:1507:78.5:142.1" with dataset-wide foreground statistics, or "zscore"); what
  // data.normalize = dataset applies. Empty when the file records none.
  std::vector<std::string> channel_normalization;
};

// The grid a case was imported from (the NIfTI importers set it), so a prediction can be written
// back with the input's header: resampled cases are resampled back to `shape`. Axis convention:
// the case's (D, H, W) are the NIfTI file's (k, j, i) axes in that order (the file's voxel order read
// in C order, as SimpleITK and nnU-Net do; nothing is reoriented). Stored as optional source_*
// attributes of /cases/<id> (docs/dataset-format.md).
struct SourceGeometry {
  std::string format = "nifti";
  Shape3 shape{};                   // (D, H, W) voxels of the source image = NIfTI (nz, ny, nx)
  std::array<double, 3> spacing{};  // mm along (D, H, W) = NIfTI pixdim (dz, dy, dx)
  int64_t qform_code = 0;
  std::array<double, 7> quatern{};  // qform parameters: b, c, d, qoffset_x, qoffset_y, qoffset_z, qfac
  std::array<double, 16> qform{};   // row-major 4x4: voxel (i, j, k, 1) -> world (x, y, z, 1), mm
  int64_t sform_code = 0;
  std::array<double, 16> sform{};       // row-major 4x4, as qform
  std::array<double, 16> affine{};      // the effective one: sform if sform_code > 0, else qform
  int64_t xyzt_units = 0;               // NIfTI xyzt_units (spatial | temporal unit codes)
  int64_t nifti_version = 1;            // 1 or 2: the version predictions are written in
  std::string file_ending = ".nii.gz";  // of the source files; predictions use it
  std::vector<std::string> files;       // source files: the image channels, then the label if any
};

struct CaseData {
  std::string id;
  torch::Tensor image;   // (C, D, H, W) float32, raw values as stored
  torch::Tensor target;  // (D, H, W): float32 for regression, uint8 labels for segmentation; undefined if absent
  torch::Tensor mask;    // (D, H, W) uint8 loss mask; undefined if absent
  std::array<double, 3> spacing = {1.0, 1.0, 1.0};  // mm per voxel along (D, H, W)
  std::optional<SourceGeometry> source;             // where the case came from; absent if unknown
};

// Reads a v1 file. Opening checks the format attributes and that every case id and split name
// follows the id rule (is_valid_case_id); reading a case checks that its fields exist and agree in
// shape. Every error names the file and the case or field (DataError), or the
// file for a missing or unreadable one (IoError).
class DatasetReader {
 public:
  explicit DatasetReader(const std::filesystem::path& path);
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  const DatasetInfo& info() const { return info_; }
  const std::filesystem::path& path() const { return path_; }
  // Case ids of `split`; ConfigError (exit 2: a wrong request) naming the available splits when absent.
  const std::vector<std::string>& split(const std::string& name) const;
  bool has_split(const std::string& name) const { return info_.splits.count(name) > 0; }
  // (D, H, W) of a case without reading its voxels.
  Shape3 case_shape(const std::string& id) const;
  // The case's spacing attribute, mm along (D, H, W), without reading its voxels: {1, 1, 1} when the
  // file records none (as read_case); DataError when it is not three positive numbers.
  std::array<double, 3> case_spacing(const std::string& id) const;
  // The whole case. Thread-safe (HDF5 serialises calls internally).
  CaseData read_case(const std::string& id) const;
  // The case's source geometry alone (no voxels); std::nullopt when the file records none.
  std::optional<SourceGeometry> read_source(const std::string& id) const;

 private:
  void read_info();  // the constructor's checks, with the file open
  std::filesystem::path path_;
  int64_t file_ = -1;  // hid_t
  DatasetInfo info_;
};

struct DatasetWriteOptions {
  int compression_level = 4;  // gzip 0..9 (with byte shuffle)
  int64_t chunk = 64;         // chunk edge in voxels (clipped to the volume)
};

// Writes a v1 file. The file is built under a temporary name beside `path` and moved into place by
// commit(), so an interrupted write never leaves a half file under the final name and never
// replaces an existing one. Without commit() the destructor removes the temporary file.
class DatasetWriter {
 public:
  DatasetWriter(std::filesystem::path path, DatasetInfo info, DatasetWriteOptions options = {});
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // image: (C, D, H, W) float32/int16/uint8; target: (D, H, W) float32 or integer; mask: (D, H, W).
  // Images are stored in their tensor dtype (int16 images keep files small and exact).
  void write_case(const CaseData& c);
  // The same in two halves, for writers that make cases on several threads: prepare() checks the
  // case and compresses its chunks (any thread, concurrently; no HDF5 calls), write_case() then
  // only stores them (the writer's thread). The file is the same as from write_case(CaseData),
  // except that chunks holding only zeros are not stored (they read back as 0).
  std::shared_ptr<const PreparedCase> prepare(const CaseData& c) const;
  void write_case(const PreparedCase& c);
  // Adds a split (case ids must have been written or be written before commit()).
  void set_split(const std::string& name, std::vector<std::string> ids);
  // Records DatasetInfo::channel_normalization (one spec per channel), written at commit().
  void set_channel_normalization(std::vector<std::string> specs);
  void commit();

 private:
  void check_writable(const CaseData& c) const;  // DataError naming the case

  std::filesystem::path path_;
  DatasetInfo info_;
  DatasetWriteOptions options_;
  std::unique_ptr<h5::StagedFile> file_;
};

// Checks a case id is usable as an HDF5 group and file name: [A-Za-z0-9_.-]+.
bool is_valid_case_id(const std::string& id);

}  // namespace u3d
