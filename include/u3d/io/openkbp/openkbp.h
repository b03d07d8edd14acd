// OpenKBP (AAPM 2020 knowledge-based planning challenge) data: the challenge's CSV layout, its
// import into dataset format v1 (`trainer import openkbp`) and its submission format.
//
// Layout (`provided-data/` as downloaded):
//   <source>/train-pats/pt_*/ validation-pats/pt_*/ test-pats/pt_*/   -> splits train / val / test
//   or one folder of pt_* folders                                      -> one split (see find_patients)
// Each patient folder holds CSV files of one 128x128x128 grid:
//   ct.csv, dose.csv             header ",data", rows "index,value" for the non-zero voxels
//   possible_dose_mask.csv,      header ",data", rows "index," (empty value) for the voxels inside
//   <Structure>.csv              (a structure that was not contoured has no file: an empty mask)
//   voxel_dimensions.csv         three numbers, the voxel size in mm
//
// Axes (checked against the challenge's own code, github.com/ababier/open-kbp,
// provided_code/data_loader.py: `np.put(np.zeros((128, 128, 128)), indices, values)`): the index is
// the flattened C-order index of a (128, 128, 128) array, index = (i0 * 128 + i1) * 128 + i2, and
// voxel_dimensions lists the voxel size along axes (0, 1, 2) in that order. On the data, axis 0 runs
// anterior -> posterior (rows), axis 1 patient right -> left (columns) and axis 2 over the axial
// slices, superior -> inferior; the first two sizes are the in-plane pixel size (equal), the third
// the slice thickness (2.5 or 3 mm). An imported case keeps these axes as (D, H, W) = (0, 1, 2) and
// spacing = voxel_dimensions, so predictions map back to CSV indices without any transposition.
#pragma once
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "u3d/io/h5/dataset.h"

namespace u3d::openkbp {

inline constexpr int64_t kGridSize = 128;                                  // voxels per axis
inline constexpr int64_t kGridVoxels = kGridSize * kGridSize * kGridSize;  // 2,097,152

// The 10 structures in the challenge's fixed order: 7 organs at risk, then 3 targets.
const std::vector<std::string>& structure_names();
const std::vector<std::string>& oar_names();     // Brainstem ... Mandible
const std::vector<std::string>& target_names();  // PTV56, PTV63, PTV70
// Channel names of an imported dataset: "ct", then structure_names().
std::vector<std::string> channel_names();
// Whether a dataset was imported from OpenKBP (dose task; channels "ct" and the 10 structures).
bool is_openkbp_dataset(const DatasetInfo& info);

// One sparse CSV file of the challenge.
enum class CsvKind {
  kValues,  // "index,value": ct.csv, dose.csv, prediction files; values finite
  kMask,    // "index,": possible_dose_mask.csv and structure files; the value is empty
};
struct SparseCsv {
  std::vector<int32_t> indices;  // flat C-order voxel indices in 0..kGridVoxels-1, file order, unique
  std::vector<float> values;     // kValues: one per index; kMask: empty
};
// Parses and checks a file: the header ",data", one "index,value" (or "index,") row per line
// (CRLF and a final empty line are fine), indices inside the grid, finite values, no index twice.
// DataError "<file>:<line>: <reason>" on the first problem; IoError when it cannot be read.
SparseCsv read_sparse_csv(const std::filesystem::path& path, CsvKind kind);
// Same from text in memory; `name` stands for the file in messages.
SparseCsv parse_sparse_csv(std::string_view text, const std::string& name, CsvKind kind);
// voxel_dimensions.csv: three positive finite numbers (mm along axes 0, 1, 2), one per line.
std::array<double, 3> read_voxel_dimensions(const std::filesystem::path& path);

// One patient folder, read and checked.
struct Patient {
  std::string id;                             // folder name, e.g. "pt_201"
  torch::Tensor ct;                           // (128, 128, 128) float32, the CSV values (HU + 1024; 0 where absent)
  bool ct_fits_int16 = true;                  // every CT value an integer in the int16 range
  torch::Tensor structures;                   // (10, 128, 128, 128) uint8 {0, 1}, structure_names() order
  std::vector<int64_t> structure_voxels;      // voxels per structure (= its CSV rows; 0 without a file)
  torch::Tensor possible_dose_mask;           // (128, 128, 128) uint8 {0, 1}
  torch::Tensor dose;                         // (128, 128, 128) float32 Gy; undefined without dose.csv
  double dose_csv_sum = 0;                    // sum of dose.csv's values in double (round-trip checks)
  std::array<double, 3> spacing = {1, 1, 1};  // voxel_dimensions.csv, mm along axes 0, 1, 2
  int64_t csv_bytes = 0;                      // bytes of CSV read (throughput figures)
};
// Reads a patient folder: ct.csv, possible_dose_mask.csv and voxel_dimensions.csv are required,
// dose.csv is optional (test patients), structure files are optional (missing = not contoured);
// other files are ignored. Errors name the file (and line).
Patient read_patient(const std::filesystem::path& dir);

// The patient as a dataset case: image (11, 128, 128, 128) = [ct, 10 structures], int16 when every
// CT value is an integer in the int16 range (exact and 4x smaller than float32), else float32;
// target = dose (when present); mask = possible_dose_mask; spacing = voxel_dimensions.
CaseData to_case(const Patient& p);

struct PatientFolder {
  std::string id;  // folder name
  std::filesystem::path dir;
  std::string split;  // train | val | test, or the single-folder split name
};
// Patient folders under `source`: a provided-data folder (train-pats, validation-pats, test-pats ->
// train, val, test; at least one must exist) or a folder holding pt_* folders (split: train for a
// folder named train-pats, val for validation-pats, test for test-pats, else `single_split`).
// Sorted by split, then by patient number (pt_2 before pt_10). UsageError when nothing is found;
// DataError for a patient id that appears twice.
std::vector<PatientFolder> find_patients(const std::filesystem::path& source, const std::string& single_split = "all");

struct CsvImportOptions {
  std::filesystem::path source;
  std::filesystem::path out;
  bool force = false;   // replace an existing output file
  int64_t threads = 0;  // parsing threads; 0: every core
  std::string single_split = "all";
  int compression_level = 1;  // gzip level of the HDF5 chunks (1: fast; masks compress well anyway)
};
struct ImportReport {
  std::map<std::string, int64_t> patients_per_split;
  int64_t patients = 0;
  int64_t patients_without_dose = 0;
  int64_t csv_bytes = 0;
  int64_t output_bytes = 0;
  double seconds = 0;
  int64_t threads = 0;
};
// Reads every patient and compresses its case (in parallel, `threads` at a time; cases are stored in
// order by this thread), checks it, and writes the dataset file
// (task dose, channels channel_names(), target "dose" in Gy, mask = possible-dose mask, splits as
// found). The file is staged and renamed into place only when every patient was read: a bad file
// stops the import with its "file:line: reason" and leaves nothing under `out`. UsageError when
// `out` exists and `force` is not set.
ImportReport import_dataset(const CsvImportOptions& options);

// The challenge's submission format: one "<patient>.csv" per patient, header ",data", then
// "index,value" rows for the voxels whose value is > 0 (as the challenge's sparse_vector_function
// keeps them), value = prediction * possible_dose_mask in Gy. Written atomically.
void write_dose_csv(const std::filesystem::path& path, const torch::Tensor& dose,
                    const torch::Tensor& possible_dose_mask = {});
// A dose CSV (reference dose.csv or a submission file) as a (128, 128, 128) float32 tensor.
torch::Tensor read_dose_csv(const std::filesystem::path& path);

}  // namespace u3d::openkbp
