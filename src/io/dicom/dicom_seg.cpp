// DICOM SEG objects read through DCMTK's dcmdata (io/dicom/dicom_seg.h).
#include "u3d/io/dicom/dicom_seg.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "dicom_detail.h"
#include "u3d/core/errors.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;
using dicom_detail::numbers;
using dicom_detail::text;

constexpr const char* kSegStorage = "1.2.840.10008.5.1.4.1.1.66.4";

// `tag` inside the first item of functional group `group`: the frame's own group, else the shared one.
std::vector<double> group_value(DcmItem* frame, DcmItem* shared, const DcmTagKey& group, const DcmTagKey& tag) {
  for (DcmItem* fg : {frame, shared}) {
    DcmItem* item = nullptr;
    if (fg && fg->findAndGetSequenceItem(group, item, 0).good()) {
      auto v = numbers(*item, tag);
      if (!v.empty()) return v;
    }
  }
  return {};
}

DcmFileFormat load_seg(const fs::path& file, bool until_pixels) {
  DcmFileFormat ff = dicom_detail::load(file, until_pixels);
  if (text(*ff.getDataset(), DCM_SOPClassUID) != kSegStorage) {
    throw DataError(fmt::format("{}: not a DICOM Segmentation (SOP class {})", file.string(), kSegStorage));
  }
  return ff;
}

}  // namespace

DicomSeg read_seg_info(const fs::path& file) {
  DcmFileFormat ff = load_seg(file, /*until_pixels=*/true);
  DcmDataset& ds = *ff.getDataset();
  DicomSeg seg;
  seg.sop_uid = text(ds, DCM_SOPInstanceUID);
  DcmItem* item = nullptr;
  for (unsigned long i = 0; ds.findAndGetSequenceItem(DCM_SegmentSequence, item, i).good(); ++i) {
    seg.labels.push_back(text(*item, DCM_SegmentLabel));
  }
  if (seg.labels.empty()) throw DataError(fmt::format("{}: a DICOM Segmentation without segments", file.string()));
  if (ds.findAndGetSequenceItem(DCM_ReferencedSeriesSequence, item, 0).good()) {
    seg.referenced_series_uid = text(*item, DCM_SeriesInstanceUID);
  }
  return seg;
}

std::vector<torch::Tensor> read_seg_masks(const fs::path& file, const DicomGrid& grid) {
  const std::string what = file.string();
  DcmFileFormat ff = load_seg(file, /*until_pixels=*/false);
  DcmDataset& ds = *ff.getDataset();
  std::map<long, size_t> segment;  // SegmentNumber -> index
  DcmItem* item = nullptr;
  for (unsigned long i = 0; ds.findAndGetSequenceItem(DCM_SegmentSequence, item, i).good(); ++i) {
    segment[std::atol(text(*item, DCM_SegmentNumber).c_str())] = i;
  }
  const auto [depth, rows, cols] = grid.shape;
  std::vector<torch::Tensor> masks;
  for (size_t s = 0; s < segment.size(); ++s) masks.push_back(torch::zeros({depth, rows, cols}, torch::kUInt8));
  const std::string type = text(ds, DCM_SegmentationType);
  if (type != "BINARY" && type != "FRACTIONAL") {
    throw DataError(fmt::format("{}: SegmentationType '{}'; expected BINARY or FRACTIONAL", what, type));
  }
  Uint16 seg_rows = 0, seg_cols = 0, bits = 0;
  ds.findAndGetUint16(DCM_Rows, seg_rows);
  ds.findAndGetUint16(DCM_Columns, seg_cols);
  ds.findAndGetUint16(DCM_BitsAllocated, bits);
  if (seg_rows != rows || seg_cols != cols) {
    throw DataError(fmt::format("{}: frames of {}x{}, the image series' slices are {}x{} (a SEG on another grid)", what,
                                seg_rows, seg_cols, rows, cols));
  }
  if ((type == "BINARY" && bits != 1) || (type == "FRACTIONAL" && bits != 8)) {
    throw DataError(fmt::format("{}: {} segmentation with BitsAllocated {}", what, type, bits));
  }
  const std::string xfer = DcmXfer(ds.getOriginalXfer()).getXferName();
  if (ds.chooseRepresentation(EXS_LittleEndianExplicit, nullptr).bad() || !ds.canWriteXfer(EXS_LittleEndianExplicit)) {
    throw DataError(fmt::format("{}: cannot decode pixel data of transfer syntax '{}'", what, xfer));
  }
  DcmElement* pixel_data = nullptr;
  Uint8* bytes = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, pixel_data).bad() || pixel_data->getUint8Array(bytes).bad() || !bytes) {
    Uint16* words = nullptr;  // pixel data as OW: the same bytes on a little-endian host
    if (!pixel_data || pixel_data->getUint16Array(words).bad() || !words) {
      throw DataError(fmt::format("{}: no readable pixel data", what));
    }
    bytes = reinterpret_cast<Uint8*>(words);
  }
  const uint64_t length = pixel_data->getLength();
  const std::vector<double> frame_count = numbers(ds, DCM_NumberOfFrames);
  const long frames = frame_count.empty() ? 0 : static_cast<long>(frame_count[0]);
  const uint64_t plane = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  const uint64_t needed = type == "BINARY" ? (plane * static_cast<uint64_t>(frames) + 7) / 8 : plane * frames;
  if (frames < 1 || length < needed) {
    throw DataError(fmt::format("{}: {} bytes of pixel data for {} frames of {}x{}", what, length, frames, rows, cols));
  }
  double threshold = 0.5;
  if (type == "FRACTIONAL") {
    const auto max = numbers(ds, DCM_MaximumFractionalValue);
    threshold = (max.empty() || !(max[0] > 0) ? 255.0 : max[0]) / 2;
  }
  DcmItem* shared = nullptr;
  ds.findAndGetSequenceItem(DCM_SharedFunctionalGroupsSequence, shared, 0);
  for (long f = 0; f < frames; ++f) {
    DcmItem* frame = nullptr;
    if (ds.findAndGetSequenceItem(DCM_PerFrameFunctionalGroupsSequence, frame, f).bad()) {
      throw DataError(fmt::format("{}: frame {} has no PerFrameFunctionalGroupsSequence item", what, f + 1));
    }
    const auto ipp = group_value(frame, shared, DCM_PlanePositionSequence, DCM_ImagePositionPatient);
    const auto iop = group_value(frame, shared, DCM_PlaneOrientationSequence, DCM_ImageOrientationPatient);
    const auto ps = group_value(frame, shared, DCM_PixelMeasuresSequence, DCM_PixelSpacing);
    DcmItem* id = nullptr;
    long number = -1;
    if (frame->findAndGetSequenceItem(DCM_SegmentIdentificationSequence, id, 0).good()) {
      number = std::atol(text(*id, DCM_ReferencedSegmentNumber).c_str());
    }
    if (ipp.size() != 3 || iop.size() != 6 || ps.size() != 2 || !segment.count(number)) {
      throw DataError(fmt::format(
          "{}: frame {} lacks its position, orientation, pixel spacing or a known segment number", what, f + 1));
    }
    const Vec3 row{iop[0], iop[1], iop[2]}, col{iop[3], iop[4], iop[5]};
    const Vec3 d{ipp[0] - grid.origin[0], ipp[1] - grid.origin[1], ipp[2] - grid.origin[2]};
    const double k = dot(d, grid.normal) / grid.spacing[0];
    const double i = dot(d, grid.row_dir) / grid.spacing[2], j = dot(d, grid.col_dir) / grid.spacing[1];
    const double ks = std::round(k);
    const bool on_grid = std::abs(dot(row, grid.row_dir) - 1) < 1e-4 && std::abs(dot(col, grid.col_dir) - 1) < 1e-4 &&
                         std::abs(ps[0] - grid.spacing[1]) < 1e-4 && std::abs(ps[1] - grid.spacing[2]) < 1e-4 &&
                         std::abs(i) < 0.01 && std::abs(j) < 0.01 && std::abs(k - ks) < 0.01 && ks >= 0 &&
                         ks < static_cast<double>(depth);
    if (!on_grid) {
      throw DataError(
          fmt::format("{}: frame {} at ({:.2f}, {:.2f}, {:.2f}) mm is not a slice of the image series "
                      "(a SEG on another grid is not supported)",
                      what, f + 1, ipp[0], ipp[1], ipp[2]));
    }
    uint8_t* out = masks[segment.at(number)][static_cast<int64_t>(ks)].data_ptr<uint8_t>();
    const uint64_t first = static_cast<uint64_t>(f) * plane;
    for (uint64_t p = 0; p < plane; ++p) {
      const uint64_t n = first + p;
      out[p] |= type == "BINARY" ? (bytes[n >> 3] >> (n & 7)) & 1 : static_cast<double>(bytes[n]) >= threshold;
    }
  }
  return masks;
}

}  // namespace u3d
