// Issue 54, round 3 of hardening, the series: what a careful reader reads of a CT series and its RT
// objects, and what it refuses in one line. Slice geometry (a missing slice, uneven spacing, two
// slices at one position, gantry tilt, an oblique orientation, two series of one patient), pixel
// encodings (rescale 0.5 / -1000.5, 8-bit, signed 16-bit, signed 12 bits in 16), hostile patient ids
// and non-ASCII names, a DICOMDIR, empty ROIs and RT Doses on other grids. The files are written by
// tests/python/write_dicom.py (pydicom, rt-utils) in one Python start per test; every case runs the
// real `trainer` binary. docs/reliability.md ("Round 3: DICOM") lists each class with its test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "dicom_writer.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

using test::kCentre, test::kCols, test::kDoseA, test::kDoseB, test::kOrigin, test::kRadius, test::kRows, test::kSlices,
    test::kSliceStep;                     // write_dicom.py's phantom (dicom_writer.h)
constexpr double kStep = test::kRowStep;  // = kColStep
constexpr double kObliqueDegrees = 20.0;

// An RT Dose grid's extent in x, y, z (mm, both ends in), as write_dicom.py's DOSE_GRIDS write it.
struct Box {
  double lo[3], hi[3];
  bool holds(const std::array<double, 3>& p) const {
    for (int a = 0; a < 3; ++a) {
      if (p[a] < lo[a] - 1e-6 || p[a] > hi[a] + 1e-6) return false;
    }
    return true;
  }
};
constexpr Box kDefaultDose{{-35.0, -45.0, 95.0}, {-35.0 + 39 * 2.5, -45.0 + 39 * 3.0, 95.0 + 23 * 3.0}};

// The CT's row and column directions: axial, or turned about x (--ct oblique).
std::array<std::array<double, 3>, 3> directions(bool oblique) {
  const double a = oblique ? kObliqueDegrees * M_PI / 180.0 : 0.0;
  return {{{1.0, 0.0, 0.0}, {0.0, std::cos(a), std::sin(a)}, {0.0, -std::sin(a), std::cos(a)}}};  // row, col, normal
}

std::array<double, 3> world(bool oblique, int64_t k, int64_t j, int64_t i) {
  const auto d = directions(oblique);
  std::array<double, 3> p{};
  for (int a = 0; a < 3; ++a) {
    p[a] = kOrigin[a] + static_cast<double>(i) * kStep * d[0][a] + static_cast<double>(j) * kStep * d[1][a] +
           static_cast<double>(k) * kSliceStep * d[2][a];
  }
  return p;
}

// write_dicom.py's stored values i + 2 j + 3 k at column i, row j, slice k, (D, H, W) float32.
torch::Tensor stored_values() {
  const auto k = torch::arange(kSlices, torch::kFloat32).view({-1, 1, 1});
  const auto j = torch::arange(kRows, torch::kFloat32).view({1, -1, 1});
  const auto i = torch::arange(kCols, torch::kFloat32).view({1, 1, -1});
  return (i + 2 * j + 3 * k).contiguous();
}

// The analytic dose at the CT voxel centres inside `box`, 0 outside; `outside` counts the latter.
torch::Tensor expected_dose(bool oblique, const Box& box, int64_t& outside) {
  torch::Tensor t = torch::zeros({kSlices, kRows, kCols}, torch::kFloat32);
  auto a = t.accessor<float, 3>();
  outside = 0;
  for (int64_t k = 0; k < kSlices; ++k) {
    for (int64_t j = 0; j < kRows; ++j) {
      for (int64_t i = 0; i < kCols; ++i) {
        const auto p = world(oblique, k, j, i);
        if (!box.holds(p)) {
          ++outside;
          continue;
        }
        a[k][j][i] = static_cast<float>(kDoseA + kDoseB[0] * p[0] + kDoseB[1] * p[1] + kDoseB[2] * p[2]);
      }
    }
  }
  return t;
}

double sphere_dice(const torch::Tensor& channel, bool oblique) {
  torch::Tensor m = torch::zeros({kSlices, kRows, kCols}, torch::kBool);
  auto a = m.accessor<bool, 3>();
  for (int64_t k = 0; k < kSlices; ++k) {
    for (int64_t j = 0; j < kRows; ++j) {
      for (int64_t i = 0; i < kCols; ++i) {
        const auto p = world(oblique, k, j, i);
        double r2 = 0;
        for (int ax = 0; ax < 3; ++ax) r2 += (p[ax] - kCentre[ax]) * (p[ax] - kCentre[ax]);
        a[k][j][i] = r2 <= kRadius * kRadius;
      }
    }
  }
  const auto x = channel.to(torch::kBool);
  return 2.0 * (x & m).sum().item<double>() / (x.sum().item<double>() + m.sum().item<double>());
}

class DicomSeries : public test::DicomWriterCli {
 protected:
  test::CommandResult import(const std::string& source, const std::string& out,
                             const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"import", "dicom", "--source", source, "--out", out, "--val-fraction", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return trainer(args);
  }
  // Writes each {patient, write_dicom.py options} into export/ and imports the folder as x.h5, which
  // must succeed; `imported` holds the import's result.
  void import_patients(const std::vector<std::pair<std::string, std::string>>& patients) {
    std::vector<Job> jobs;
    for (const auto& [patient, extra] : patients) jobs.push_back({"export", patient, extra});
    ASSERT_NO_FATAL_FAILURE(write_all(jobs));
    imported = import("export", "x.h5");
    ASSERT_EQ(imported.exit_code, 0) << imported.output;
  }
  test::CommandResult imported;
};

// One folder, one patient per geometry: the usable ones imported on the right grid, each other one a
// warning line naming the patient, the series and what is wrong (exit 0); --strict refuses them all.
// Copies of a file (one SOP Instance UID twice) are read once, not taken for two slices at a position.
TEST_F(DicomSeries, SliceGeometryIsReadOrRefusedInOneLine) {
  ASSERT_NO_FATAL_FAILURE(write_all({{"export", "GAP", ""},
                                     {"export", "UNEVEN", "--ct uneven"},
                                     {"export", "TWICE", "--ct duplicate --no-rt"},
                                     {"export", "TILT", "--ct tilt"},
                                     {"export", "OBLIQUE", "--ct oblique"},
                                     {"export", "TWO", "--folder TWO_a --no-rt"},
                                     {"export", "TWO", "--folder TWO_b --no-rt"}}));
  fs::remove(dir / "export/GAP/ct/ct_010.dcm");
  // Copies of files already in the folder (the same SOP instance) are read once: not two slices at one
  // position, not two RT Doses.
  fs::copy_file(dir / "export/OBLIQUE/ct/ct_005.dcm", dir / "export/OBLIQUE/ct/ct_005 (copy).dcm");
  fs::copy_file(dir / "export/OBLIQUE/rtdose.dcm", dir / "export/OBLIQUE/copy_of_rtdose.dcm");
  const auto r = import("export", "x.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  struct Row {
    const char* patient;
    const char* says;
  };
  for (const Row& row : {Row{"GAP", "uneven slice spacing (2.500 to 5.000 mm; a missing slice?)"},
                         Row{"UNEVEN", "uneven slice spacing (2.500 to 3.000 mm; a missing slice?)"},
                         Row{"TWICE", "two slices at position 125.000 mm ("},
                         Row{"TILT", "slice positions are not along the slice normal (gantry tilt)"},
                         Row{"TWO", "2 candidate image series ("}}) {
    SCOPED_TRACE(row.patient);
    const std::string head = fmt::format("[warning] import dicom: left out: patient {}", row.patient);
    EXPECT_EQ(occurrences(r.output, head + ":") + occurrences(r.output, head + ", series "), 1u) << r.output;
    EXPECT_NE(line_with(r.output, head).find(row.says), std::string::npos) << line_with(r.output, head);
  }
  EXPECT_NE(line_with(r.output, "left out: patient TWICE").find("ct_010.dcm and "), std::string::npos);
  EXPECT_NE(r.output.find("5 patient(s) left out"), std::string::npos) << r.output;
  EXPECT_EQ(occurrences(r.output,
                        "import dicom: 2 file(s) under export repeat a SOP Instance UID (copies); each "
                        "instance read once"),
            1u)
      << r.output;
  // The oblique series (turned 20 degrees about x): voxels, affine, the axial RT Dose resampled onto it
  // and the sphere's contours, all in patient coordinates.
  DatasetReader x((dir / "x.h5").string());
  ASSERT_EQ(x.info().case_ids, (std::vector<std::string>{"OBLIQUE"}));
  const CaseData c = x.read_case("OBLIQUE");
  EXPECT_TRUE(torch::equal(c.image[0], stored_values() - 1024));
  ASSERT_TRUE(c.source.has_value());
  const auto d = directions(/*oblique=*/true);
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(c.source->affine[static_cast<size_t>(4 * a + 0)], d[0][a] * kStep, 1e-6) << a;
    EXPECT_NEAR(c.source->affine[static_cast<size_t>(4 * a + 1)], d[1][a] * kStep, 1e-6) << a;
    EXPECT_NEAR(c.source->affine[static_cast<size_t>(4 * a + 2)], d[2][a] * kSliceStep, 1e-6) << a;
    EXPECT_NEAR(c.source->affine[static_cast<size_t>(4 * a + 3)], kOrigin[a], 1e-6) << a;
  }
  int64_t outside = 0;
  const torch::Tensor dose = expected_dose(/*oblique=*/true, kDefaultDose, outside);
  ASSERT_TRUE(c.target.defined());
  EXPECT_LT((c.target - dose).abs().max().item<double>(), 1e-3);
  EXPECT_NE(line_with(r.output, "patient OBLIQUE, series ").find(fmt::format("{} voxels outside the RT Dose", outside)),
            std::string::npos)
      << r.output;
  EXPECT_GE(sphere_dice(c.image[1], /*oblique=*/true), 0.95);
  const auto strict = import("export", "y.h5", {"--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("5 of 6 patient(s) unusable (--strict), nothing written"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "y.h5"));
}

// Stored values the reader must turn into the same HU: rescale slope 0.5 and intercept -1000.5,
// 8-bit pixels, signed 16-bit values, and signed values in 12 of 16 bits (upper bits not extended).
TEST_F(DicomSeries, PixelEncodingsAndRescaleGiveTheHuACarefulReaderGets) {
  ASSERT_NO_FATAL_FAILURE(import_patients({{"RESCALE", "--ct rescale --no-rt"},
                                           {"U8", "--ct u8 --no-rt"},
                                           {"S16", "--ct s16 --no-rt"},
                                           {"S12", "--ct s12 --no-rt"}}));
  DatasetReader x((dir / "x.h5").string());
  const torch::Tensor v = stored_values();
  struct Row {
    const char* patient;
    torch::Tensor hu;
  };
  for (const Row& row :
       {Row{"RESCALE", v * 0.5 - 1000.5}, Row{"U8", v - 1024}, Row{"S16", v - 1024}, Row{"S12", v - 1024}}) {
    SCOPED_TRACE(row.patient);
    const CaseData c = x.read_case(row.patient);
    EXPECT_TRUE(torch::equal(c.image[0], row.hu)) << (c.image[0] - row.hu).abs().max().item<double>();
  }
}

// PatientIDs with '/', '..', 200 and 250 characters, PatientNames in ISO_IR 100 and ISO_IR 192: case
// ids that are file names, every output inside OUT, and the name written back as it was read. (A
// 250-character id made `predict -i` fail at its last step: "File name too long".)
TEST_F(DicomSeries, HostilePatientIdsAndNonAsciiNamesStayInsideTheOutput) {
  const std::string long_id(200, 'L'), longer_id(250, 'M');  // kept; shortened to 200 (a file name's 255 bytes)
  ASSERT_NO_FATAL_FAILURE(
      write_all({{"export", "../../escape", "--folder up --name 'Müller^Jürgen' --charset 'ISO_IR 100'"},
                 {"export", "a/b", "--folder slash --name 'Ωμέγα^Ελένη' --charset 'ISO_IR 192'"},
                 {"export", "..", "--folder dots"},
                 {"export", long_id, "--folder long"},
                 {"export", longer_id, "--folder longer --no-rt"}}));
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader x((dir / "x.h5").string());
  std::vector<std::string> ids = x.info().case_ids;
  std::sort(ids.begin(), ids.end());
  ASSERT_EQ(ids.size(), 5u);
  const std::string shortened = ids[1];  // 191 M, '_', 8 hex digits of the PatientID's SHA-256
  EXPECT_EQ(shortened.size(), 200u);
  EXPECT_EQ(shortened.substr(0, 192), std::string(191, 'M') + "_") << shortened;
  EXPECT_EQ(ids, (std::vector<std::string>{long_id, shortened, "a_b", "patient..", "patient.._.._escape"}));
  for (const auto& id : ids) EXPECT_TRUE(is_valid_case_id(id)) << id;
  ASSERT_NO_FATAL_FAILURE(train_one_step("rt"));
  const auto p = trainer({"predict", "-i", "export", "-o", "out", "--run", "runs/rt", "--checkpoint", "last"});
  ASSERT_EQ(p.exit_code, 0) << p.output;
  std::vector<std::string> written;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    const std::string rel = fs::relative(e.path(), dir.path()).string();
    if (e.is_regular_file() && rel.find("export") != 0 && rel.find("runs") != 0 &&
        rel.find(".h5") == std::string::npos && rel.find(".yaml") == std::string::npos) {
      written.push_back(rel);
    }
  }
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"out/" + long_id + ".dcm", "out/" + shortened + ".dcm", "out/a_b.dcm",
                                               "out/patient...dcm", "out/patient.._.._escape.dcm"}));
  EXPECT_FALSE(fs::exists(dir.path().parent_path() / "escape.dcm"));
  const std::string cmd = "PYTHONIOENCODING=utf-8 " + python_->string() +
                          " -c \"import pydicom, sys; [print(str(pydicom.dcmread(f).PatientName)) for f in "
                          "sys.argv[1:]]\" " +
                          (dir / "out/patient.._.._escape.dcm").string() + " " + (dir / "out/a_b.dcm").string() +
                          " > " + (dir / "names.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(test::read_text(dir / "names.txt"), "Müller^Jürgen\nΩμέγα^Ελένη\n");
}

// A File-set (DICOMDIR and PT*/ST*/SE*/IM* files) imports as the plain folder does, the DICOMDIR said
// in one line; ROIs without contours are one warning line each, not a silent all-zero channel.
TEST_F(DicomSeries, DicomdirIsIgnoredAndEmptyRoisAreWarnings) {
  ASSERT_NO_FATAL_FAILURE(write_all({{"fileset", "P1", "--dicomdir"}, {"empty", "P1", "--empty-roi"}}));
  ASSERT_TRUE(fs::exists(dir / "fileset/P1/DICOMDIR"));
  auto r = import("fileset", "a.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "import dicom: 1 DICOMDIR file(s) under fileset ignored"), 1u) << r.output;
  EXPECT_EQ(r.output.find("are not DICOM"), std::string::npos) << r.output;
  const CaseData a = DatasetReader((dir / "a.h5").string()).read_case("P1");
  EXPECT_TRUE(torch::equal(a.image[0], stored_values() - 1024));
  EXPECT_GE(sphere_dice(a.image[1], /*oblique=*/false), 0.98);
  r = import("empty", "b.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* roi : {"Empty", "Unlisted"}) {
    SCOPED_TRACE(roi);
    const std::string line = line_with(r.output, fmt::format("structure '{}' has no contours", roi));
    EXPECT_NE(line.find("[warning] import dicom: patient P1, series "), std::string::npos) << r.output;
    EXPECT_NE(line.find(fmt::format("channel '{}' is all zeros", roi)), std::string::npos) << line;
  }
  EXPECT_EQ(r.output.find("structure 'Sphere' has no contours"), std::string::npos) << r.output;
}

// An RT Dose on a larger and coarser grid, a smaller one, one shifted to cover part of the CT: the
// analytic dose at the CT's voxel centres, 0 Gy outside (counted in one line); 1000 mm away: refused.
TEST_F(DicomSeries, RtDoseOnOtherGridsIsResampledOrRefused) {
  ASSERT_NO_FATAL_FAILURE(import_patients({{"LARGER", "--dose-grid larger"},
                                           {"SMALLER", "--dose-grid smaller"},
                                           {"SHIFTED", "--dose-grid shifted"},
                                           {"AWAY", "--dose-grid disjoint"}}));
  const test::CommandResult& r = imported;
  DatasetReader x((dir / "x.h5").string());
  struct Row {
    const char* patient;
    Box box;
  };
  for (const Row& row : {Row{"LARGER", {{-80.0, -90.0, 60.0}, {116.0, 106.0, 216.0}}},
                         Row{"SMALLER", {{-10.0, -20.0, 110.0}, {20.0, 10.0, 140.0}}},
                         Row{"SHIFTED", {{-9.7, -45.7, 96.1}, {-9.7 + 39 * 2.5, -45.7 + 39 * 3.0, 96.1 + 23 * 3.0}}}}) {
    SCOPED_TRACE(row.patient);
    int64_t outside = 0;
    const torch::Tensor dose = expected_dose(/*oblique=*/false, row.box, outside);
    const CaseData c = x.read_case(row.patient);
    ASSERT_TRUE(c.target.defined());
    EXPECT_LT((c.target - dose).abs().max().item<double>(), 1e-3);
    const std::string line = line_with(r.output, fmt::format("patient {}, series ", row.patient));
    if (outside == 0) {
      EXPECT_EQ(line.find("outside the RT Dose grid"), std::string::npos) << line;
    } else {
      EXPECT_NE(line.find(fmt::format(": {} voxels outside the RT Dose grid (dose 0)", outside)), std::string::npos)
          << r.output;
    }
  }
  const std::string away = line_with(r.output, "left out: patient AWAY, series ");
  EXPECT_NE(away.find("rtdose.dcm: the RT Dose grid does not overlap the image"), std::string::npos) << r.output;
  EXPECT_EQ(x.info().case_ids.size(), 3u);
}

}  // namespace
}  // namespace u3d
