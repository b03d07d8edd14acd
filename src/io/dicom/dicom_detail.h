// What the DICOM reader (dicom.cpp, dicom_j2k.cpp) and writer (dicom_write.cpp) share; private to src/io/dicom/.
#pragma once
// clang-format off
#include <dcmtk/config/osconfig.h>  // first, as DCMTK requires
// clang-format on
#include <dcmtk/dcmdata/dccodec.h>   // DcmCodec::determineStartFragment (dicom_j2k.cpp)
#include <dcmtk/dcmdata/dcpxitem.h>  // DcmPixelItem: an encapsulated fragment (dicom_j2k.cpp)
#include <dcmtk/dcmdata/dctk.h>

#include <filesystem>
#include <string>
#include <vector>

namespace u3d::dicom_detail {

// The decoders of compressed pixel data (JPEG, JPEG-LS, RLE), a quiet DCMTK log and the data
// dictionary (the bundle's copy without a system one), once per process; IoError without a dictionary.
void init_dcmtk();

// `file` read whole or up to its pixel data; DataError naming the file when it is not DICOM.
DcmFileFormat load(const std::filesystem::path& file, bool until_pixels);

// An attribute's value as text, trailing spaces and NULs (DICOM's padding) removed; "" when absent.
std::string text(DcmItem& item, const DcmTagKey& tag);

// Every value of a multi-valued decimal attribute (DS, IS: backslash-separated text); empty when absent.
std::vector<double> numbers(DcmItem& item, const DcmTagKey& tag);

}  // namespace u3d::dicom_detail
