// NIfTI-1 and NIfTI-2 volumes (.nii, .nii.gz) through nifticlib (Debian libnifti2-dev).
//
// Axis convention: a file with dims (nx, ny, nz) = NIfTI axes (i, j, k) becomes the tensor
// (D, H, W) = (nz, ny, nx): the file's own voxel order read in C order, as SimpleITK's
// GetArrayFromImage and nnU-Net do. Nothing is reoriented; the header's qform/sform stay with the
// case (SourceGeometry) so a prediction is written back in the same grid with the same header.
//
//   NiftiVolume v = read_nifti("case_0000.nii.gz");          // v.data (D, H, W), v.geometry
//   write_nifti("pred.nii.gz", labels_uint8, v.geometry);     // same qform/sform/pixdim/units
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>

#include "u3d/io/h5/dataset.h"

namespace u3d {

struct NiftiVolume {
  // (D, H, W) CPU tensor: uint8, int8, int16, int32 or int64 for integer files (uint16 widens to
  // int32, uint32 and uint64 to int64), float32 or float64 for float files; float32 when the
  // header's scl_slope/scl_inter scale the stored values (applied here, as SimpleITK does).
  torch::Tensor data;
  SourceGeometry geometry;  // shape, spacing, qform/sform, units; files = {the path}
  int datatype = 0;         // NIfTI DT_* code of the stored voxels
};

// Whether `path` names a NIfTI file by its ending (.nii or .nii.gz).
bool is_nifti_path(const std::filesystem::path& path);

// Reads a 3-D NIfTI file (a 4-D file with one volume counts as 3-D). Every failure names the file:
// IoError when it is missing; DataError when it is not NIfTI, is truncated (fewer voxel bytes than
// the header promises, or a broken gzip stream), has more than one volume, or an unsupported type.
NiftiVolume read_nifti(const std::filesystem::path& path);
// The header's geometry alone (voxels are not read).
SourceGeometry read_nifti_geometry(const std::filesystem::path& path);

// Writes a NIfTI file slab by slab along D, so a large volume never has to be in memory at once.
// The header comes from `geometry` (shape, pixdim, qform with its quaternion, sform, units, NIfTI
// version) and the voxel type from `dtype` (uint8, int16, int32, float32). The file is written
// under a temporary name in the same folder and renamed into place by commit(); without commit()
// the destructor removes it, so an interrupted write never leaves a partial file.
class NiftiWriter {
 public:
  NiftiWriter(std::filesystem::path path, const SourceGeometry& geometry, torch::ScalarType dtype,
              const std::string& description = "");
  ~NiftiWriter();
  NiftiWriter(const NiftiWriter&) = delete;
  NiftiWriter& operator=(const NiftiWriter&) = delete;

  // The next rows along D: (d, H, W) with H, W of the geometry; converted to the file's dtype.
  void write_slab(const torch::Tensor& slab);
  // Checks every row was written, closes, fsyncs and renames into place.
  void commit();
  int64_t rows_written() const { return rows_; }

 private:
  struct State;
  std::filesystem::path path_, tmp_path_;
  SourceGeometry geometry_;
  torch::ScalarType dtype_;
  std::unique_ptr<State> state_;
  int64_t rows_ = 0;
  bool committed_ = false;
};

// Whole volume (D, H, W) at once through NiftiWriter.
void write_nifti(const std::filesystem::path& path, const torch::Tensor& volume, const SourceGeometry& geometry,
                 const std::string& description = "");

// A geometry for a plain grid: the given shape and spacing, qform = sform = scaling only
// (codes 1 = scanner), millimetres. For writing volumes that came without a NIfTI header.
SourceGeometry plain_geometry(const Shape3& shape, const std::array<double, 3>& spacing);

}  // namespace u3d
