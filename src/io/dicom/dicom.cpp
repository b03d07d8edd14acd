// DICOM and DICOM-RT reading through DCMTK's dcmdata (io/dicom/dicom.h).
#include "u3d/io/dicom/dicom.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // first, as DCMTK requires
// clang-format on
#include <dcmtk/dcmdata/dcrledrg.h>
#include <dcmtk/dcmdata/dctk.h>
#include <dcmtk/dcmjpeg/djdecode.h>
#include <dcmtk/dcmjpls/djdecode.h>
#include <dcmtk/oflog/oflog.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <type_traits>

#include "dicom_detail.h"
#include "dicom_j2k.h"
#include "u3d/core/errors.h"
#include "u3d/core/input_limits.h"

namespace u3d {
namespace dicom_detail {

namespace fs = std::filesystem;

constexpr int64_t kMaxDicomFileBytes = int64_t{8} << 30;

void init_dcmtk() {
  static std::once_flag once;
  std::call_once(once, [] {
    OFLog::configure(OFLogger::FATAL_LOG_LEVEL);
    // Elements a converter kept as VR UN (e.g. PatientID, Modality of an RT Dose) are read with the
    // data dictionary's VR, so that their values are text and numbers, not hex bytes.
    dcmEnableUnknownVRConversion.set(OFTrue);
    DJDecoderRegistration::registerCodecs();
    DJLSDecoderRegistration::registerCodecs();
    DcmRLEDecoderRegistration::registerCodecs();
  });
  static std::once_flag bundled;
  std::call_once(bundled, [] {  // the bundle's copy (share/unet3d-trainer/dicom.dic) without a system one
    if (dcmDataDict.isDictionaryLoaded()) return;
    std::error_code ec;
    const fs::path dic =
        fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "share/unet3d-trainer/dicom.dic";
    if (ec || !fs::is_regular_file(dic, ec)) return;
    dcmDataDict.wrlock().loadDictionary(dic.c_str());
    dcmDataDict.wrunlock();
  });
  if (!dcmDataDict.isDictionaryLoaded()) {
    throw IoError(
        "DCMTK's data dictionary is not loaded: install libdcmtk17 (dicom.dic) or point DCMDICTPATH at a dicom.dic");
  }
}

DcmFileFormat load(const fs::path& file, bool until_pixels) {
  init_dcmtk();
  check_input_file(file, kMaxDicomFileBytes, "a DICOM file");
  DcmFileFormat ff;
  const OFCondition c = until_pixels ? ff.loadFileUntilTag(file.c_str(), EXS_Unknown, EGL_noChange, DCM_MaxReadLength,
                                                           ERM_autoDetect, DCM_PixelData)
                                     : ff.loadFile(file.c_str());
  if (c.bad()) throw DataError(fmt::format("{}: not a readable DICOM file ({})", file.string(), c.text()));
  return ff;
}

std::string text(DcmItem& item, const DcmTagKey& tag) {
  OFString s;
  if (item.findAndGetOFStringArray(tag, s).bad()) return "";
  std::string out = s.c_str();
  while (!out.empty() && (out.back() == ' ' || out.back() == '\0')) out.pop_back();
  return out;
}

std::vector<double> numbers(DcmItem& item, const DcmTagKey& tag) {
  const std::string s = text(item, tag);
  std::vector<double> out;
  const char* p = s.c_str();
  while (*p) {
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    if (end == p) break;
    out.push_back(v);
    p = end;
    while (*p == ' ' || *p == '\\') ++p;
  }
  return out;
}

}  // namespace dicom_detail
namespace {

namespace fs = std::filesystem;
using dicom_detail::init_dcmtk;
using dicom_detail::load;
using dicom_detail::numbers;
using dicom_detail::text;

std::vector<double> required(DcmItem& item, const DcmTagKey& tag, size_t n, const std::string& what, const char* name) {
  std::vector<double> v = numbers(item, tag);
  if (v.size() != n || !std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); })) {
    throw DataError(fmt::format("{}: {} holds {} numbers; expected {}", what, name, v.size(), n));
  }
  return v;
}

void orientation(DcmItem& item, const std::string& what, Vec3& row, Vec3& col, Vec3& normal) {
  const auto o = required(item, DCM_ImageOrientationPatient, 6, what, "ImageOrientationPatient");
  row = {o[0], o[1], o[2]};
  col = {o[3], o[4], o[5]};
  normal = cross(row, col);
  const double n = std::sqrt(dot(normal, normal));
  if (n < 0.99 || n > 1.01 || std::abs(dot(row, col)) > 1e-3) {
    throw DataError(fmt::format("{}: ImageOrientationPatient is not two orthogonal unit vectors", what));
  }
  for (double& x : normal) x /= n;
}

// The frames' pixels as float32 (frames, rows, columns), stored values (no rescale).
torch::Tensor pixels(DcmFileFormat& ff, const std::string& what) {
  DcmDataset& ds = *ff.getDataset();
  Uint16 rows = 0, cols = 0, bits = 0, repr = 0, samples = 1;
  ds.findAndGetUint16(DCM_Rows, rows);
  ds.findAndGetUint16(DCM_Columns, cols);
  ds.findAndGetUint16(DCM_BitsAllocated, bits);
  ds.findAndGetUint16(DCM_PixelRepresentation, repr);
  ds.findAndGetUint16(DCM_SamplesPerPixel, samples);
  Sint32 frames = 1;
  if (ds.findAndGetSint32(DCM_NumberOfFrames, frames).bad() || frames < 1) frames = 1;
  if (samples != 1) throw DataError(fmt::format("{}: {} samples per pixel (colour); expected 1", what, samples));
  if (rows == 0 || cols == 0) throw DataError(fmt::format("{}: no Rows/Columns", what));
  if (bits != 8 && bits != 16 && bits != 32) throw DataError(fmt::format("{}: {} bits allocated", what, bits));
  check_declared_size(what, {frames, rows, cols}, bits / 8, bits == 8 ? "uint8" : bits == 16 ? "uint16" : "uint32");
  const DcmXfer xfer(ds.getOriginalXfer());
  // The file meta's UID as written: DCMTK 3.6.7 knows no HTJ2K UID (its DcmXfer would say what it guessed).
  std::string uid = ff.getMetaInfo() ? text(*ff.getMetaInfo(), DCM_TransferSyntaxUID) : "";
  if (uid.empty()) uid = xfer.getXferID();
  if (dicom_j2k_detail::is_jpeg2000(uid)) {  // DCMTK 3.6.7 has no JPEG 2000 decoder
    return dicom_j2k_detail::decode_jpeg2000(ds, {frames, rows, cols, bits, repr != 0}, what);
  }
  if (ds.chooseRepresentation(EXS_LittleEndianExplicit, nullptr).bad() || !ds.canWriteXfer(EXS_LittleEndianExplicit)) {
    throw DataError(
        fmt::format("{}: cannot decode pixel data of transfer syntax '{}' ({})", what, xfer.getXferName(), uid));
  }
  const int64_t n = int64_t{frames} * rows * cols;
  const Uint8* raw = nullptr;
  unsigned long bytes = 0;
  if (bits == 8) {
    if (ds.findAndGetUint8Array(DCM_PixelData, raw, &bytes).bad()) raw = nullptr;
  } else {
    const Uint16* w = nullptr;
    if (ds.findAndGetUint16Array(DCM_PixelData, w, &bytes).good()) {
      raw = reinterpret_cast<const Uint8*>(w);
      bytes *= 2;
    }
  }
  if (raw == nullptr || static_cast<int64_t>(bytes) < n * (bits / 8)) {
    throw DataError(fmt::format("{}: pixel data holds {} bytes; {} frames of {}x{} at {} bits need {}", what, bytes,
                                frames, rows, cols, bits, n * (bits / 8)));
  }
  torch::Tensor t = torch::empty({frames, rows, cols}, torch::kFloat32);
  float* out = t.data_ptr<float>();
  // BitsStored of BitsAllocated, HighBit the top one: the other bits may hold anything (overlays, or a
  // signed value's sign not extended), so the value is taken from the stored bits alone, as pydicom does.
  Uint16 stored = bits, high = static_cast<Uint16>(bits - 1);
  ds.findAndGetUint16(DCM_BitsStored, stored);
  ds.findAndGetUint16(DCM_HighBit, high);
  if (stored == 0 || stored > bits || high >= bits || high + 1 < stored) {
    throw DataError(
        fmt::format("{}: BitsStored {} with HighBit {} do not fit {} bits allocated", what, stored, high, bits));
  }
  const int shift = high + 1 - stored;
  const uint32_t mask = stored < 32 ? (uint32_t{1} << stored) - 1 : ~uint32_t{0};
  const auto convert = [&](auto zero) {  // little-endian host (x86-64, arm64) and data
    using T = decltype(zero);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, raw + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      if (stored == bits) {
        out[i] = static_cast<float>(v);
        continue;
      }
      const uint32_t u = (static_cast<uint32_t>(static_cast<std::make_unsigned_t<T>>(v)) >> shift) & mask;
      const bool negative = repr != 0 && (u >> (stored - 1)) != 0;
      out[i] = static_cast<float>(negative ? static_cast<int64_t>(u) - (int64_t{1} << stored) : int64_t{u});
    }
  };
  if (bits == 8) {
    repr ? convert(int8_t{}) : convert(uint8_t{});
  } else if (bits == 16) {
    repr ? convert(int16_t{}) : convert(uint16_t{});
  } else {
    repr ? convert(int32_t{}) : convert(uint32_t{});
  }
  return t;
}

}  // namespace

Vec3 DicomGrid::world(double k, double j, double i) const {
  Vec3 p{};
  for (int a = 0; a < 3; ++a) {
    p[a] = origin[a] + i * spacing[2] * row_dir[a] + j * spacing[1] * col_dir[a] + k * spacing[0] * normal[a];
  }
  return p;
}

std::array<double, 16> DicomGrid::affine() const {
  std::array<double, 16> m{};
  for (int a = 0; a < 3; ++a) {
    m[a * 4 + 0] = row_dir[a] * spacing[2];
    m[a * 4 + 1] = col_dir[a] * spacing[1];
    m[a * 4 + 2] = normal[a] * spacing[0];
    m[a * 4 + 3] = origin[a];
  }
  m[15] = 1;
  return m;
}

std::optional<DicomFileInfo> dicom_file_info(const fs::path& file) {
  DcmFileFormat ff;
  try {
    ff = load(file, /*until_pixels=*/true);
  } catch (const DataError&) {
    return std::nullopt;
  }
  DcmDataset& ds = *ff.getDataset();
  DicomFileInfo info;
  info.file = file;
  info.sop_uid = text(ds, DCM_SOPInstanceUID);
  if (text(ds, DCM_SOPClassUID).empty()) return std::nullopt;
  info.patient_id = text(ds, DCM_PatientID);
  info.patient_name = text(ds, DCM_PatientName);
  info.study_uid = text(ds, DCM_StudyInstanceUID);
  info.series_uid = text(ds, DCM_SeriesInstanceUID);
  info.modality = text(ds, DCM_Modality);
  info.transfer_syntax = DcmXfer(ds.getOriginalXfer()).getXferID();
  info.bare = ff.getMetaInfo() == nullptr || ff.getMetaInfo()->card() == 0;
  return info;
}

ImageSeries read_image_series(const std::vector<fs::path>& files, const std::string& what) {
  struct Slice {
    double position;
    Vec3 ipp;
    torch::Tensor values;  // (rows, columns)
    std::string file;
    double thickness;
  };
  std::vector<Slice> slices;
  Vec3 row{}, col{}, normal{};
  std::array<double, 2> spacing{};
  std::string study_uid, frame_uid;
  for (const fs::path& f : files) {
    const std::string where = fmt::format("{} ({})", what, f.string());
    DcmFileFormat ff = load(f, /*until_pixels=*/false);
    DcmDataset& ds = *ff.getDataset();
    if (slices.empty()) {  // the series' study and frame of reference, as its first file read records them
      study_uid = text(ds, DCM_StudyInstanceUID);
      frame_uid = text(ds, DCM_FrameOfReferenceUID);
    }
    Vec3 r{}, c{}, n{};
    orientation(ds, where, r, c, n);
    const auto ps = required(ds, DCM_PixelSpacing, 2, where, "PixelSpacing");
    const auto ipp = required(ds, DCM_ImagePositionPatient, 3, where, "ImagePositionPatient");
    if (slices.empty()) {
      row = r, col = c, normal = n, spacing = {ps[0], ps[1]};
    } else if (std::abs(dot(r, row) - 1) > 1e-4 || std::abs(dot(c, col) - 1) > 1e-4) {
      throw DataError(fmt::format("{}: mixed ImageOrientationPatient within the series", where));
    } else if (std::abs(ps[0] - spacing[0]) > 1e-4 || std::abs(ps[1] - spacing[1]) > 1e-4) {
      throw DataError(fmt::format("{}: PixelSpacing {}\\{} differs from the series' {}\\{}", where, ps[0], ps[1],
                                  spacing[0], spacing[1]));
    }
    torch::Tensor v = pixels(ff, where);
    if (v.size(0) != 1) throw DataError(fmt::format("{}: {} frames; expected single-frame slices", where, v.size(0)));
    if (!slices.empty() && v.sizes() != slices[0].values.unsqueeze(0).sizes()) {
      throw DataError(fmt::format("{}: slice of {}x{}, the series' first is {}x{} (mixed sizes)", where, v.size(1),
                                  v.size(2), slices[0].values.size(0), slices[0].values.size(1)));
    }
    const auto slope = numbers(ds, DCM_RescaleSlope), intercept = numbers(ds, DCM_RescaleIntercept);
    const double a = slope.empty() ? 1.0 : slope[0], b = intercept.empty() ? 0.0 : intercept[0];
    const auto thick = numbers(ds, DCM_SliceThickness);
    const Vec3 p{ipp[0], ipp[1], ipp[2]};
    slices.push_back({dot(p, normal), p, v[0] * a + b, f.string(), thick.empty() ? 1.0 : thick[0]});
  }
  if (slices.empty()) throw DataError(fmt::format("{}: no image files", what));
  std::sort(slices.begin(), slices.end(), [](const Slice& x, const Slice& y) { return x.position < y.position; });
  double step = slices[0].thickness > 0 ? slices[0].thickness : 1.0;
  if (slices.size() > 1) {
    std::vector<double> d;
    for (size_t k = 1; k < slices.size(); ++k) {
      const double dz = slices[k].position - slices[k - 1].position;
      if (dz < 1e-3) {
        throw DataError(fmt::format("{}: two slices at position {:.3f} mm ({} and {})", what, slices[k].position,
                                    slices[k - 1].file, slices[k].file));
      }
      Vec3 delta{};
      for (int a = 0; a < 3; ++a) delta[a] = slices[k].ipp[a] - slices[k - 1].ipp[a];
      if (std::abs(dot(delta, normal) - std::sqrt(dot(delta, delta))) > 1e-3 * std::max(1.0, dz)) {
        throw DataError(
            fmt::format("{}: slice positions are not along the slice normal (gantry tilt); "
                        "resample the series first",
                        what));
      }
      d.push_back(dz);
    }
    const auto [lo, hi] = std::minmax_element(d.begin(), d.end());
    step = std::accumulate(d.begin(), d.end(), 0.0) / static_cast<double>(d.size());
    if (*hi - *lo > 0.01 * step + 1e-3) {
      throw DataError(fmt::format("{}: uneven slice spacing ({:.3f} to {:.3f} mm; a missing slice?)", what, *lo, *hi));
    }
  }
  ImageSeries s;
  s.study_uid = study_uid;
  s.frame_of_reference_uid = frame_uid;
  s.grid.shape = {static_cast<int64_t>(slices.size()), slices[0].values.size(0), slices[0].values.size(1)};
  s.grid.origin = slices[0].ipp;
  s.grid.row_dir = row, s.grid.col_dir = col, s.grid.normal = normal;
  s.grid.spacing = {step, spacing[0], spacing[1]};
  std::vector<torch::Tensor> planes;
  for (const Slice& sl : slices) {
    planes.push_back(sl.values);
    s.files.push_back(sl.file);
  }
  s.voxels = torch::stack(planes).contiguous();
  return s;
}

RtStructureSet read_rtstruct(const fs::path& file) {
  DcmFileFormat ff = load(file, /*until_pixels=*/false);
  DcmDataset& ds = *ff.getDataset();
  const std::string what = file.string();
  RtStructureSet out;
  std::vector<std::pair<std::string, std::string>> rois;  // number, name
  DcmItem* item = nullptr;
  for (unsigned long i = 0; ds.findAndGetSequenceItem(DCM_StructureSetROISequence, item, i).good(); ++i) {
    rois.emplace_back(text(*item, DCM_ROINumber), text(*item, DCM_ROIName));
  }
  if (rois.empty()) throw DataError(fmt::format("{}: RT Structure Set without StructureSetROISequence items", what));
  for (const auto& [number, name] : rois) out.structures.push_back({name, {}});
  for (unsigned long i = 0; ds.findAndGetSequenceItem(DCM_ROIContourSequence, item, i).good(); ++i) {
    const std::string ref = text(*item, DCM_ReferencedROINumber);
    const auto r = std::find_if(rois.begin(), rois.end(), [&](const auto& p) { return p.first == ref; });
    if (r == rois.end()) continue;
    RtStructure& s = out.structures[static_cast<size_t>(r - rois.begin())];
    DcmItem* contour = nullptr;
    for (unsigned long c = 0; item->findAndGetSequenceItem(DCM_ContourSequence, contour, c).good(); ++c) {
      if (text(*contour, DCM_ContourGeometricType) != "CLOSED_PLANAR") continue;
      const std::vector<double> v = numbers(*contour, DCM_ContourData);
      if (v.size() < 9 || v.size() % 3 != 0) {
        throw DataError(fmt::format("{}: structure '{}': a contour of {} numbers; expected x,y,z triples, 3 or more",
                                    what, s.name, v.size()));
      }
      std::vector<Vec3> poly;
      for (size_t p = 0; p < v.size(); p += 3) poly.push_back({v[p], v[p + 1], v[p + 2]});
      s.contours.push_back(std::move(poly));
    }
  }
  DcmItem *frame = nullptr, *study = nullptr, *series = nullptr;
  if (ds.findAndGetSequenceItem(DCM_ReferencedFrameOfReferenceSequence, frame, 0).good() &&
      frame->findAndGetSequenceItem(DCM_RTReferencedStudySequence, study, 0).good() &&
      study->findAndGetSequenceItem(DCM_RTReferencedSeriesSequence, series, 0).good()) {
    out.referenced_series_uid = text(*series, DCM_SeriesInstanceUID);
  }
  return out;
}

RtDose read_rtdose(const fs::path& file) {
  const std::string what = file.string();
  RtDose d;
  DcmFileFormat ff = load(file, /*until_pixels=*/false);
  DcmDataset& ds = *ff.getDataset();
  orientation(ds, what, d.row_dir, d.col_dir, d.normal);
  const auto ps = required(ds, DCM_PixelSpacing, 2, what, "PixelSpacing");
  const auto ipp = required(ds, DCM_ImagePositionPatient, 3, what, "ImagePositionPatient");
  d.pixel_spacing = {ps[0], ps[1]};
  d.origin = {ipp[0], ipp[1], ipp[2]};
  const auto scaling = numbers(ds, DCM_DoseGridScaling);
  if (scaling.size() != 1 || !(scaling[0] > 0)) throw DataError(fmt::format("{}: no positive DoseGridScaling", what));
  d.units = text(ds, DCM_DoseUnits);
  d.gy = pixels(ff, what) * static_cast<float>(scaling[0]);
  const int64_t frames = d.gy.size(0);
  d.frame_offsets = numbers(ds, DCM_GridFrameOffsetVector);
  if (frames == 1 && d.frame_offsets.empty()) d.frame_offsets = {0.0};
  DcmItem* plan = nullptr;
  if (ds.findAndGetSequenceItem(DCM_ReferencedRTPlanSequence, plan, 0).good()) {
    d.referenced_plan_uid = text(*plan, DCM_ReferencedSOPInstanceUID);
  }
  if (static_cast<int64_t>(d.frame_offsets.size()) != frames) {
    throw DataError(
        fmt::format("{}: GridFrameOffsetVector holds {} offsets for {} frames", what, d.frame_offsets.size(), frames));
  }
  if (d.frame_offsets[0] != 0.0) {  // absolute positions along the normal: relative to the first frame
    const double first = d.frame_offsets[0];
    for (double& o : d.frame_offsets) o -= first;
  }
  if (frames > 1 && d.frame_offsets[1] < d.frame_offsets[0]) {  // frames stacked against the normal
    std::reverse(d.frame_offsets.begin(), d.frame_offsets.end());
    d.gy = d.gy.flip({0}).contiguous();
  }
  for (size_t k = 1; k < d.frame_offsets.size(); ++k) {
    if (!(d.frame_offsets[k] > d.frame_offsets[k - 1])) {
      throw DataError(fmt::format("{}: GridFrameOffsetVector is not strictly monotonic", what));
    }
  }
  return d;
}

RtPlan read_rtplan(const fs::path& file) {
  DcmFileFormat ff = load(file, /*until_pixels=*/false);
  DcmDataset& ds = *ff.getDataset();
  RtPlan plan;
  plan.sop_uid = text(ds, DCM_SOPInstanceUID);
  DcmItem* item = nullptr;
  for (unsigned long i = 0; ds.findAndGetSequenceItem(DCM_DoseReferenceSequence, item, i).good(); ++i) {
    const std::string type = text(*item, DCM_DoseReferenceType);
    const auto dose = numbers(*item, DCM_TargetPrescriptionDose);
    if ((type.empty() || type == "TARGET") && !dose.empty() && std::isfinite(dose[0]) && dose[0] > 0) {
      plan.prescription_gy = std::max(plan.prescription_gy, dose[0]);
    }
  }
  return plan;
}

}  // namespace u3d
