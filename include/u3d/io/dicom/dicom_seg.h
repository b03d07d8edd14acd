// DICOM Segmentation objects (SEG, SOP class 1.2.840.10008.5.1.4.1.1.66.4) read through DCMTK's
// dcmdata, for `trainer import dicom` (io/dicom/dicom_import.h): each segment a mask on the image series it
// was made on. docs/dicom.md.
//
// A frame is placed by its PlanePositionSequence's ImagePositionPatient on the slice of the grid
// (io/dicom/dicom.h) at that position; its orientation (PlaneOrientationSequence), PixelSpacing
// (PixelMeasuresSequence; per frame or shared), rows and columns must be the grid's, as in a SEG made
// on the series' own slices (highdicom, 3D Slicer, dcmqi). Frames may be left out (empty slices) and
// come in any order; SegmentIdentificationSequence names each frame's segment. BINARY pixels (1 bit,
// packed across frames, least significant bit first) are taken as they are; FRACTIONAL ones (8 bit)
// are in at MaximumFractionalValue / 2 and above. Errors are DataErrors naming the file.
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "u3d/io/dicom/dicom.h"

namespace u3d {

struct DicomSeg {
  std::string sop_uid;
  std::string referenced_series_uid;  // ReferencedSeriesSequence's first SeriesInstanceUID, "" if none
  std::vector<std::string> labels;    // SegmentLabel of each segment, in SegmentSequence order
};

// The header alone (up to the pixel data): segment labels and the series referenced.
DicomSeg read_seg_info(const std::filesystem::path& file);

// Each segment as a (D, H, W) uint8 0/1 mask on `grid`, in read_seg_info's label order.
std::vector<torch::Tensor> read_seg_masks(const std::filesystem::path& file, const DicomGrid& grid);

}  // namespace u3d
