// JPEG 2000 pixel data, which DCMTK 3.6.7 cannot decode, decoded with OpenJPEG (libopenjp2 2.5);
// private to src/io/ (dicom.cpp's pixel reader). docs/dicom.md, "What is read".
//
// Transfer syntaxes: JPEG 2000 lossless only (1.2.840.10008.1.2.4.90), JPEG 2000 (.4.91, lossless or
// lossy) and HTJ2K (.4.201 lossless, .4.202 lossless RPCL, .4.203), each frame a raw codestream (FF 4F
// FF 51) or a JP2 file (its signature box). A frame decodes to one component of Rows x Columns at a
// precision up to BitsAllocated, or it is refused. A codestream whose signedness differs from
// PixelRepresentation (some vendors write signed CT as unsigned) is read with PixelRepresentation's:
// the codestream's bits are kept and reinterpreted, as GDCM and pydicom do.
#pragma once
#include <torch/torch.h>

#include <string>

#include "dicom_detail.h"

namespace u3d::dicom_j2k_detail {

// Whether the transfer syntax (a UID) is one of the JPEG 2000 / HTJ2K ones above.
bool is_jpeg2000(const std::string& transfer_syntax_uid);

// What the data set declares of its frames (checked by the caller: 1 sample per pixel, rows and
// columns > 0, BitsAllocated 8, 16 or 32).
struct FrameLayout {
  int64_t frames = 1, rows = 0, columns = 0;
  int bits_allocated = 16;
  bool is_signed = false;  // PixelRepresentation 1
};

// Every frame of `ds`'s encapsulated pixel data decoded: (frames, rows, columns) float32, stored
// values (no rescale). DataError naming `what` (the file) and what was found, on one line, when the
// fragments cannot be split into frames, OpenJPEG fails, or a frame is not what `layout` declares.
torch::Tensor decode_jpeg2000(DcmDataset& ds, const FrameLayout& layout, const std::string& what);

}  // namespace u3d::dicom_j2k_detail
