// DICOM-RT written back for a planning system (docs/dicom.md): a predicted dose as an RT Dose, and
// predicted labels as an RT Structure Set, on the image series a case was imported from
// (io/dicom/dicom_import.h), through DCMTK.
//
//   write_rtdose("predictions/test/P1.dcm", dose, geometry, "u3d predicted dose (best.pt)");
//
// The RT Dose (SOP class 1.2.840.10008.5.1.4.1.1.481.2, explicit VR little endian):
//   - patient, study (Study Instance UID, date, time, ID, accession) and Frame of Reference UID
//     copied from the first source file of `g` (a slice of the imported image series), so a planning
//     system or 3D Slicer places it on that CT; new SOP Instance and Series Instance UIDs; Modality
//     RTDOSE, Manufacturer "unet3d-trainer", SeriesDescription `description`;
//   - the grid: g.shape (frames, rows, columns), ImagePositionPatient = voxel (0, 0, 0) of g.affine
//     (LPS mm), ImageOrientationPatient and PixelSpacing (between rows, between columns) from it,
//     GridFrameOffsetVector 0, s, 2 s, ... (s = g.spacing[0], signed along row x column),
//     FrameIncrementPointer to it;
//   - the values: DoseUnits GY, DoseType PHYSICAL, DoseSummationType PLAN, 32-bit unsigned pixels
//     with DoseGridScaling = max dose / (2^32 - 1) (negative predictions are 0);
//   - ReferencedRTPlanSequence: the RT Plan among g.files after the series (the import's), if any.
//
// gy: (D, H, W) float32 on the CPU, Gy, D, H, W = g.shape. The file is written beside `path` and
// renamed into place. IoError naming the file for a source file that cannot be read (moved, or an
// anonymised import that kept none) or a write that fails.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "u3d/io/h5/dataset.h"

namespace u3d {

void write_rtdose(const std::filesystem::path& path, const torch::Tensor& gy, const SourceGeometry& g,
                  const std::string& description);

// A predicted label map as an RT Structure Set (SOP class 1.2.840.10008.5.1.4.1.1.481.3) on the same
// series: one ROI per class 1..K-1 (ROINumber k, ROIName names[k - 1], generated AUTOMATIC), each
// slice's outlines of label k (io/dicom/mask_contours.h) as CLOSED_PLANAR contours in LPS mm on that
// slice's plane, each referencing its CT slice (SOP Class and Instance UID read from g.files, the
// first D of which are the series in slice order), the series and study referenced in
// ReferencedFrameOfReferenceSequence; patient, study, frame of reference and new UIDs as above.
// A class with no voxel is an ROI without contours.
// labels: (D, H, W) uint8 on the CPU, D, H, W = g.shape; names: K - 1 names. Errors as above.
void write_rtstruct(const std::filesystem::path& path, const torch::Tensor& labels, const SourceGeometry& g,
                    const std::vector<std::string>& names, const std::string& description);

}  // namespace u3d
