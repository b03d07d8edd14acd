#include "u3d/io/dicom/dicom_write.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <limits>

#include "dicom_detail.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/text.h"
#include "u3d/io/dicom/mask_contours.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;
using Vec = std::array<double, 3>;
using dicom_detail::text;

// A decimal string (DS) value: at most 16 characters.
std::string ds(double v) { return fmt::format("{:.9g}", v); }

std::string ds_list(const std::vector<double>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "\\" : "") + ds(v[i]);
  return out;
}

std::string new_uid(const char* root) {
  char uid[100];
  dcmGenerateUniqueIdentifier(uid, root);
  return uid;
}

void put(DcmItem& item, const DcmTagKey& tag, const std::string& value, const fs::path& path) {
  const OFCondition c = item.putAndInsertString(tag, value.c_str());
  if (c.bad()) throw IoError(fmt::format("{}: cannot set {} ({})", path.string(), DcmTag(tag).getTagName(), c.text()));
}

// The grid of g.affine: voxel (i, j, k) = origin + i * col_step * row_dir + j * row_step * col_dir
// + k * spacing[0] * slice_dir (row_dir along a row, i.e. the column index; DICOM's naming).
struct Grid {
  Vec origin{}, row_dir{}, col_dir{}, slice_dir{};
  double slice_sign = 1;  // slice_dir against row_dir x col_dir: -1
  Vec world(double k, double j, double i, const SourceGeometry& g) const {
    Vec p{};
    for (int a = 0; a < 3; ++a) {
      p[a] =
          origin[a] + i * g.spacing[2] * row_dir[a] + j * g.spacing[1] * col_dir[a] + k * g.spacing[0] * slice_dir[a];
    }
    return p;
  }
};

Grid grid_of(const SourceGeometry& g) {
  const auto& a = g.affine;
  Grid grid;
  for (int r = 0; r < 3; ++r) {
    grid.origin[r] = a[static_cast<size_t>(4 * r + 3)];
    grid.row_dir[r] = a[static_cast<size_t>(4 * r)] / g.spacing[2];
    grid.col_dir[r] = a[static_cast<size_t>(4 * r + 1)] / g.spacing[1];
    grid.slice_dir[r] = a[static_cast<size_t>(4 * r + 2)] / g.spacing[0];
  }
  const Vec& u = grid.row_dir;
  const Vec& v = grid.col_dir;
  const Vec n = {u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]};
  grid.slice_sign = n[0] * grid.slice_dir[0] + n[1] * grid.slice_dir[1] + n[2] * grid.slice_dir[2] < 0 ? -1.0 : 1.0;
  return grid;
}

// The first source file (a slice of the series) read up to its pixels; IoError naming `path`.
DcmFileFormat source_slice(const fs::path& path, const SourceGeometry& g, size_t index) {
  if (g.files.size() <= index) {
    throw IoError(
        fmt::format("{}: the case records no source DICOM file to take patient, study and frame of "
                    "reference from (imported with --anonymize?)",
                    path.string()));
  }
  try {
    return dicom_detail::load(g.files[index], /*until_pixels=*/true);
  } catch (const DataError& e) {
    throw IoError(fmt::format("{}: the source series cannot be read to reference it: {}", path.string(), e.what()));
  }
}

// The attributes every object written here shares: patient, study and frame of reference of the source
// series (type 2 attributes empty when absent), new instance and series UIDs, modality, manufacturer.
void put_common(DcmItem& from, DcmItem& to, const char* sop_class, const char* modality, const std::string& description,
                const fs::path& path) {
  for (const DcmTagKey& tag :
       {DCM_SpecificCharacterSet, DCM_PatientName, DCM_PatientID, DCM_PatientBirthDate, DCM_PatientSex,
        DCM_StudyInstanceUID, DCM_StudyDate, DCM_StudyTime, DCM_ReferringPhysicianName, DCM_StudyID,
        DCM_AccessionNumber, DCM_FrameOfReferenceUID, DCM_PositionReferenceIndicator}) {
    OFString v;
    const bool found = from.findAndGetOFStringArray(tag, v).good();
    if (!found && tag == DCM_SpecificCharacterSet) continue;
    put(to, tag, found ? v.c_str() : "", path);
  }
  put(to, DCM_SOPClassUID, sop_class, path);
  put(to, DCM_SOPInstanceUID, new_uid(SITE_INSTANCE_UID_ROOT), path);
  put(to, DCM_SeriesInstanceUID, new_uid(SITE_SERIES_UID_ROOT), path);
  put(to, DCM_Modality, modality, path);
  put(to, DCM_Manufacturer, "unet3d-trainer", path);
  put(to, DCM_SeriesDescription, description.substr(0, 64), path);
  put(to, DCM_SeriesNumber, "1", path);
  put(to, DCM_InstanceNumber, "1", path);
}

// Written beside `path` and renamed into place.
void save(DcmFileFormat& file, const fs::path& path, const char* what) {
  ensure_writable_directory(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  const fs::path tmp = path.parent_path() / fmt::format(".{}.partial.{}", path.filename().string(), ::getpid());
  const OFCondition saved = file.saveFile(tmp.c_str(), EXS_LittleEndianExplicit);
  if (saved.bad()) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw IoError(fmt::format("{}: cannot write the {} ({})", path.string(), what, saved.text()));
  }
  commit_staged_file(tmp, path);
}

void check_shape(const fs::path& path, const torch::Tensor& t, const SourceGeometry& g) {
  if (t.dim() != 3 || t.size(0) != g.shape[0] || t.size(1) != g.shape[1] || t.size(2) != g.shape[2]) {
    throw IoError(fmt::format("{}: a prediction of {} for a grid of {}", path.string(), shape_text(t.sizes()),
                              shape_text(g.shape)));
  }
}

}  // namespace

void write_rtdose(const fs::path& path, const torch::Tensor& gy, const SourceGeometry& g,
                  const std::string& description) {
  check_shape(path, gy, g);
  DcmFileFormat reference = source_slice(path, g, 0);
  DcmFileFormat file;
  DcmDataset& d = *file.getDataset();
  put_common(*reference.getDataset(), d, UID_RTDoseStorage, "RTDOSE", description, path);
  const auto [frames, rows, cols] = g.shape;
  const Grid grid = grid_of(g);
  std::vector<double> offsets;
  for (int64_t k = 0; k < frames; ++k) offsets.push_back(grid.slice_sign * static_cast<double>(k) * g.spacing[0]);
  put(d, DCM_ImagePositionPatient, ds_list({grid.origin[0], grid.origin[1], grid.origin[2]}), path);
  put(d, DCM_ImageOrientationPatient,
      ds_list({grid.row_dir[0], grid.row_dir[1], grid.row_dir[2], grid.col_dir[0], grid.col_dir[1], grid.col_dir[2]}),
      path);
  put(d, DCM_PixelSpacing, ds_list({g.spacing[1], g.spacing[2]}), path);
  put(d, DCM_SliceThickness, ds(g.spacing[0]), path);
  put(d, DCM_GridFrameOffsetVector, ds_list(offsets), path);
  put(d, DCM_NumberOfFrames, std::to_string(frames), path);
  d.putAndInsertTagKey(DCM_FrameIncrementPointer, DCM_GridFrameOffsetVector);
  d.putAndInsertUint16(DCM_Rows, static_cast<Uint16>(rows));
  d.putAndInsertUint16(DCM_Columns, static_cast<Uint16>(cols));
  d.putAndInsertUint16(DCM_SamplesPerPixel, 1);
  put(d, DCM_PhotometricInterpretation, "MONOCHROME2", path);
  d.putAndInsertUint16(DCM_BitsAllocated, 32);
  d.putAndInsertUint16(DCM_BitsStored, 32);
  d.putAndInsertUint16(DCM_HighBit, 31);
  d.putAndInsertUint16(DCM_PixelRepresentation, 0);
  put(d, DCM_DoseUnits, "GY", path);
  put(d, DCM_DoseType, "PHYSICAL", path);
  put(d, DCM_DoseSummationType, "PLAN", path);
  for (size_t f = static_cast<size_t>(frames); f < g.files.size(); ++f) {  // the RT objects after the series
    DcmFileFormat rt = source_slice(path, g, f);
    if (text(*rt.getDataset(), DCM_Modality) != "RTPLAN") continue;
    DcmItem* plan = nullptr;
    d.findOrCreateSequenceItem(DCM_ReferencedRTPlanSequence, plan, 0);
    put(*plan, DCM_ReferencedSOPClassUID, text(*rt.getDataset(), DCM_SOPClassUID), path);
    put(*plan, DCM_ReferencedSOPInstanceUID, text(*rt.getDataset(), DCM_SOPInstanceUID), path);
  }

  // Pixels = round(dose / scaling), the scaling as written (9 significant digits) so they agree.
  const torch::Tensor dose = gy.to(torch::kFloat64).clamp_min(0).contiguous();
  const double max = dose.max().item<double>();
  constexpr double kTop = static_cast<double>(std::numeric_limits<uint32_t>::max());
  const std::string scaling_text = ds(max > 0 ? max / kTop * (1 + 1e-8) : 1e-6);
  const double scaling = std::stod(scaling_text);
  put(d, DCM_DoseGridScaling, scaling_text, path);
  const torch::Tensor pixels = (dose / scaling).round().clamp(0, kTop).to(torch::kInt64).contiguous();
  std::vector<uint32_t> values(static_cast<size_t>(pixels.numel()));
  const int64_t* p = pixels.data_ptr<int64_t>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint32_t>(p[i]);
  // 32-bit pixels as OW words, little endian (the host's order on the platforms built for).
  const OFCondition c = d.putAndInsertUint16Array(DCM_PixelData, reinterpret_cast<const Uint16*>(values.data()),
                                                  static_cast<unsigned long>(2 * values.size()));
  if (c.bad()) throw IoError(fmt::format("{}: cannot set the pixel data ({})", path.string(), c.text()));
  save(file, path, "RT Dose");
}

void write_rtstruct(const fs::path& path, const torch::Tensor& labels, const SourceGeometry& g,
                    const std::vector<std::string>& names, const std::string& description) {
  check_shape(path, labels, g);
  const int64_t slices = g.shape[0];
  DcmFileFormat reference = source_slice(path, g, 0);
  DcmDataset& ref = *reference.getDataset();
  // Each slice's SOP Class and Instance UID, in slice order.
  std::vector<std::pair<std::string, std::string>> sops = {{text(ref, DCM_SOPClassUID), text(ref, DCM_SOPInstanceUID)}};
  for (int64_t k = 1; k < slices; ++k) {
    DcmFileFormat f = source_slice(path, g, static_cast<size_t>(k));
    sops.emplace_back(text(*f.getDataset(), DCM_SOPClassUID), text(*f.getDataset(), DCM_SOPInstanceUID));
  }
  DcmFileFormat file;
  DcmDataset& d = *file.getDataset();
  put_common(ref, d, UID_RTStructureSetStorage, "RTSTRUCT", description, path);
  put(d, DCM_StructureSetLabel, "u3d", path);
  put(d, DCM_StructureSetDate, "", path);
  put(d, DCM_StructureSetTime, "", path);
  const std::string frame_uid = text(ref, DCM_FrameOfReferenceUID);
  const auto image_ref = [&](DcmItem& item, int64_t k) {
    put(item, DCM_ReferencedSOPClassUID, sops[static_cast<size_t>(k)].first, path);
    put(item, DCM_ReferencedSOPInstanceUID, sops[static_cast<size_t>(k)].second, path);
  };
  DcmItem* frame = nullptr;
  DcmItem* study = nullptr;
  DcmItem* series = nullptr;
  d.findOrCreateSequenceItem(DCM_ReferencedFrameOfReferenceSequence, frame, 0);
  put(*frame, DCM_FrameOfReferenceUID, frame_uid, path);
  frame->findOrCreateSequenceItem(DCM_RTReferencedStudySequence, study, 0);
  put(*study, DCM_ReferencedSOPClassUID, "1.2.840.10008.3.1.2.3.1", path);  // detached study management
  put(*study, DCM_ReferencedSOPInstanceUID, text(ref, DCM_StudyInstanceUID), path);
  study->findOrCreateSequenceItem(DCM_RTReferencedSeriesSequence, series, 0);
  put(*series, DCM_SeriesInstanceUID, text(ref, DCM_SeriesInstanceUID), path);
  for (int64_t k = 0; k < slices; ++k) {
    DcmItem* item = nullptr;
    series->findOrCreateSequenceItem(DCM_ContourImageSequence, item, static_cast<long>(k));
    image_ref(*item, k);
  }

  const Grid grid = grid_of(g);
  const torch::Tensor lab = labels.to(torch::kUInt8).contiguous();
  for (size_t c = 0; c < names.size(); ++c) {
    const int64_t label = static_cast<int64_t>(c) + 1;
    const std::string number = std::to_string(label);
    DcmItem *roi = nullptr, *contours = nullptr, *observation = nullptr;
    d.findOrCreateSequenceItem(DCM_StructureSetROISequence, roi, static_cast<long>(c));
    put(*roi, DCM_ROINumber, number, path);
    put(*roi, DCM_ReferencedFrameOfReferenceUID, frame_uid, path);
    put(*roi, DCM_ROIName, names[c].substr(0, 64), path);
    put(*roi, DCM_ROIGenerationAlgorithm, "AUTOMATIC", path);
    d.findOrCreateSequenceItem(DCM_ROIContourSequence, contours, static_cast<long>(c));
    static constexpr int kColours[6][3] = {{255, 0, 0},   {0, 200, 0},   {0, 0, 255},
                                           {255, 200, 0}, {200, 0, 200}, {0, 200, 200}};
    const auto& rgb = kColours[c % 6];
    put(*contours, DCM_ROIDisplayColor, fmt::format("{}\\{}\\{}", rgb[0], rgb[1], rgb[2]), path);
    put(*contours, DCM_ReferencedROINumber, number, path);
    long n = 0;
    for (int64_t k = 0; k < slices; ++k) {
      const torch::Tensor slice = lab[k].eq(label);
      if (!slice.any().item<bool>()) continue;
      for (const Polygon2d& loop : mask_contours(slice)) {
        DcmItem* contour = nullptr;
        contours->findOrCreateSequenceItem(DCM_ContourSequence, contour, n++);
        DcmItem* image = nullptr;
        contour->findOrCreateSequenceItem(DCM_ContourImageSequence, image, 0);
        image_ref(*image, k);
        put(*contour, DCM_ContourGeometricType, "CLOSED_PLANAR", path);
        put(*contour, DCM_NumberOfContourPoints, std::to_string(loop.size()), path);
        std::vector<double> xyz;
        for (const auto& [row, col] : loop) {
          const Vec p = grid.world(static_cast<double>(k), row, col, g);
          xyz.insert(xyz.end(), p.begin(), p.end());
        }
        put(*contour, DCM_ContourData, ds_list(xyz), path);
      }
    }
    d.findOrCreateSequenceItem(DCM_RTROIObservationsSequence, observation, static_cast<long>(c));
    put(*observation, DCM_ObservationNumber, number, path);
    put(*observation, DCM_ReferencedROINumber, number, path);
    put(*observation, DCM_RTROIInterpretedType, "ORGAN", path);
    put(*observation, DCM_ROIInterpreter, "", path);
  }
  save(file, path, "RT Structure Set");
}

}  // namespace u3d
