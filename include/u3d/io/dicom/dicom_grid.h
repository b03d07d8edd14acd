// DICOM-RT objects put onto an image grid (io/dicom/dicom.h's coordinates): contours rasterised, dose
// resampled. Pure functions of what io/dicom/dicom.h read; docs/dicom.md.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "u3d/io/dicom/dicom.h"

namespace u3d {

// A structure's contours as a (D, H, W) uint8 mask on `grid`: each polygon is assigned to the slice
// nearest its plane and filled even-odd per slice (all polygons of one slice together, so a contour
// inside another is a hole) at the voxel centres, voxel centres on a polygon's edge included (as
// rt-utils' and OpenCV's fillPoly). `off_grid` counts polygons whose plane lies outside the slices or
// off a slice by more than half a slice step, or that are not parallel to the slices (skipped).
torch::Tensor rasterize_structure(const RtStructure& s, const DicomGrid& grid, int64_t* off_grid = nullptr);

// The dose trilinearly resampled at the voxel centres of `grid`: (D, H, W) float32 in Gy; voxels
// outside the dose grid get 0 (`outside` counts them when given).
torch::Tensor resample_dose(const RtDose& dose, const DicomGrid& grid, int64_t* outside = nullptr);

}  // namespace u3d
