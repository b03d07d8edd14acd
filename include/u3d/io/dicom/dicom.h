// DICOM and DICOM-RT objects read with DCMTK (dcmdata; compressed pixel data through the dcmjpeg,
// dcmjpls and RLE decoders, JPEG 2000 through OpenJPEG), for `trainer import dicom`
// (io/dicom/dicom_import.h). docs/dicom.md.
//
// Coordinates are DICOM patient coordinates (LPS, mm: x to the patient's left, y to the posterior,
// z to the head). A grid's voxel (k, j, i) = (slice, row, column) sits at
//   origin + i * spacing[2] * row_dir + j * spacing[1] * col_dir + k * spacing[0] * normal,
// row_dir and col_dir being ImageOrientationPatient's two triples, normal = row_dir x col_dir and
// spacing = (slice step, PixelSpacing[0] between rows, PixelSpacing[1] between columns) in mm.
// Every error is a DataError naming the file (or the series) and what was expected, on one line.
#pragma once
#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

using Vec3 = std::array<double, 3>;
inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}

// What grouping needs of a file: read up to the pixel data. std::nullopt for a file that is not DICOM
// (no preamble and no parsable data set) or has no SOP Class UID. A bare data set (no preamble and no
// file meta: older exports, PACS dumps; transfer syntax detected from its first bytes) is read too.
struct DicomFileInfo {
  std::filesystem::path file;
  std::string patient_id, patient_name, study_uid, series_uid, sop_uid, modality;
  std::string transfer_syntax;  // its UID
  bool bare = false;            // no preamble and file meta: a bare data set
};
std::optional<DicomFileInfo> dicom_file_info(const std::filesystem::path& file);

// The image grid of a series (see the coordinate note above).
struct DicomGrid {
  Shape3 shape{};  // (slices, rows, columns)
  Vec3 origin{};   // ImagePositionPatient of the first slice along the normal, mm
  Vec3 row_dir{}, col_dir{}, normal{};
  std::array<double, 3> spacing{};  // mm: slice step, between rows, between columns
  // (x, y, z) of voxel (k, j, i) (fractional indices allowed).
  Vec3 world(double k, double j, double i) const;
  // Row-major 4x4: voxel (i, j, k, 1) -> LPS (x, y, z, 1) mm; i = column, j = row, k = slice.
  std::array<double, 16> affine() const;
};

// A CT or MR series: slices ordered by ImagePositionPatient along the normal (never by file name
// or InstanceNumber), RescaleSlope/Intercept applied. DataError (naming `what`, e.g. "patient P1,
// series 1.2.3") for mixed sizes or orientations, gantry tilt, duplicate positions, uneven spacing
// (a missing slice), colour or undecodable pixel data (docs/dicom.md lists the transfer syntaxes). One
// slice: the slice step is SliceThickness (1 mm when absent).
struct ImageSeries {
  DicomGrid grid;
  torch::Tensor voxels;                           // (D, H, W) float32, modality values (HU for CT)
  std::vector<std::string> files;                 // in slice order
  std::string study_uid, frame_of_reference_uid;  // as the first file read records them (one series)
};
ImageSeries read_image_series(const std::vector<std::filesystem::path>& files, const std::string& what);

// An RT Structure Set's ROIs: name and closed planar contours (other contour types are skipped).
struct RtStructure {
  std::string name;
  std::vector<std::vector<Vec3>> contours;  // each a polygon in LPS mm
};
struct RtStructureSet {
  std::vector<RtStructure> structures;  // in StructureSetROISequence order
  std::string referenced_series_uid;    // the image series it was drawn on ("" if not recorded)
};
RtStructureSet read_rtstruct(const std::filesystem::path& file);

// An RT Dose grid in Gy: DoseGridScaling applied, frames placed by GridFrameOffsetVector (relative
// to ImagePositionPatient along the normal; an absolute vector, first entry not 0, is made relative;
// descending offsets, frames stacked against the normal, are reordered).
struct RtDose {
  Vec3 origin{}, row_dir{}, col_dir{}, normal{};
  std::array<double, 2> pixel_spacing{};  // between rows, between columns
  std::vector<double> frame_offsets;      // mm along the normal, ascending
  torch::Tensor gy;                       // (frames, rows, columns) float32
  std::string units;                      // DoseUnits (GY or RELATIVE)
  std::string referenced_plan_uid;        // ReferencedRTPlanSequence's first SOP Instance UID, "" if none
};
RtDose read_rtdose(const std::filesystem::path& file);

// An RT Plan's prescription: the largest TargetPrescriptionDose (Gy) among its DoseReferenceSequence
// items of DoseReferenceType TARGET (items without a type count too), 0 when none records one.
struct RtPlan {
  std::string sop_uid;
  double prescription_gy = 0;
};
RtPlan read_rtplan(const std::filesystem::path& file);

}  // namespace u3d
