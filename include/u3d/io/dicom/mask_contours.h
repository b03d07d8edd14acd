// The outlines of a 2D mask as closed polygons (marching squares at level 0.5), for RT Structure
// Sets (io/dicom/dicom_write.h), whose readers fill each slice's polygons even-odd.
//
//   mask_contours(mask)   mask (H, W) bool/uint8, nonzero = inside
//     -> {{{r0, c0}, {r1, c1}, ...}, ...}   one closed loop per outline (the first point not repeated),
//        points in pixel coordinates (row, column; pixel centres at integers), collinear points dropped.
//
// Each vertex sits on the midpoint between an inside and an outside pixel, moved `inset` pixels
// (default 0.1) towards the inside one. Both kinds of reader then get the mask back exactly: those
// that fill the polygons even-odd at the pixel centres (trainer's importer, most planning systems),
// and those that round the vertices to pixel centres and fill with the outline included (rt-utils,
// OpenCV's fillPoly), for which the inset vertices round to the inside boundary pixels. The price
// is an outline 0.1 pixel inside the voxels' edge. inset 0: the midpoints themselves.
//
// Holes are loops of their own. Pixels touching only at a corner are kept apart (4-connectivity of
// the inside). No library on this platform's package list does this (OpenCV's findContours would
// add ~100 MB to the bundle for one function), hence the few lines here.
#pragma once
#include <torch/torch.h>

#include <array>
#include <vector>

namespace u3d {

using Polygon2d = std::vector<std::array<double, 2>>;  // (row, column) pixel coordinates

std::vector<Polygon2d> mask_contours(const torch::Tensor& mask, double inset = 0.1);

}  // namespace u3d
