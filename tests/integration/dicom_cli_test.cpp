// `trainer import dicom` through the real binary on DICOM written by independent writers: a CT series
// and an RT Dose by pydicom, an RT Structure Set by rt-utils (tests/python/write_dicom.py, run with the
// torch venv's Python, where scripts/setup.sh installs both), and pydicom's own sample files. A known
// sphere comes back as a channel (Dice >= 0.98), an analytic dose field within 1%; shuffled names,
// nested folders and a second patient change nothing; bad input is one line naming the patient.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "dicom_writer.h"
#include "test_support.h"
#include "u3d/io/dicom/dicom_write.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/h5.h"

namespace u3d {
namespace {

using test::kCentre, test::kColStep, test::kCols, test::kDoseA, test::kDoseB, test::kOrigin, test::kRadius, test::kRows,
    test::kRowStep, test::kSlices, test::kSliceStep;  // write_dicom.py's phantom (dicom_writer.h)

double world(int axis, int64_t k, int64_t j, int64_t i) {
  return kOrigin[axis] + (axis == 0 ? i * kColStep : axis == 1 ? j * kRowStep : k * kSliceStep);
}

torch::Tensor expected_sphere() {
  torch::Tensor m = torch::zeros({kSlices, kRows, kCols}, torch::kUInt8);
  auto a = m.accessor<uint8_t, 3>();
  for (int64_t k = 0; k < kSlices; ++k) {
    for (int64_t j = 0; j < kRows; ++j) {
      for (int64_t i = 0; i < kCols; ++i) {
        double r2 = 0;
        for (int ax = 0; ax < 3; ++ax) r2 += std::pow(world(ax, k, j, i) - kCentre[ax], 2);
        a[k][j][i] = r2 <= kRadius * kRadius;
      }
    }
  }
  return m;
}

// write_dicom.py's dose field at the CT voxel centres, (D, H, W) float64 in Gy.
torch::Tensor analytic_dose() {
  const auto k = torch::arange(kSlices, torch::kFloat64).view({-1, 1, 1});
  const auto j = torch::arange(kRows, torch::kFloat64).view({1, -1, 1});
  const auto i = torch::arange(kCols, torch::kFloat64).view({1, 1, -1});
  return kDoseA + kDoseB[0] * (kOrigin[0] + i * kColStep) + kDoseB[1] * (kOrigin[1] + j * kRowStep) +
         kDoseB[2] * (kOrigin[2] + k * kSliceStep);
}

double dice(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.to(torch::kBool), y = b.to(torch::kBool);
  return 2.0 * (x & y).sum().item<double>() / (x.sum().item<double>() + y.sum().item<double>());
}

class DicomCli : public test::DicomWriterCli {
 protected:
  // A string attribute of /cases/<id> in `file`, "" when absent.
  std::string case_attribute(const std::string& file, const std::string& id, const std::string& name) {
    const std::string path = (dir / file).string();
    const h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    EXPECT_GE(f.get(), 0) << path;
    const h5::Handle group = h5::open_group(f.get(), "cases/" + id, path);
    return h5::has_attribute(group.get(), name) ? h5::read_string_attribute(group.get(), name, path) : "";
  }
  // source_prescription_gy of /cases/<id>, 0 when absent.
  double prescription(const std::string& file, const std::string& id) {
    const std::string path = (dir / file).string();
    const h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    EXPECT_GE(f.get(), 0) << path;
    const h5::Handle group = h5::open_group(f.get(), "cases/" + id, path);
    const std::string name = "source_prescription_gy";
    return h5::has_attribute(group.get(), name) ? h5::read_double_list_attribute(group.get(), name, path).at(0) : 0.0;
  }
  void expect_one_error(const test::CommandResult& r, const std::string& needle) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
    size_t errors = 0;
    for (size_t p = r.output.find("[error]"); p != std::string::npos; p = r.output.find("[error]", p + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.output;
  }
  // A 2-filter model trained one step on x.h5 as runs/<name>, then --predict-only of its val split.
  void train_one_step_and_predict(const std::string& name) {
    ASSERT_NO_FATAL_FAILURE(train_one_step(name));
    const auto r = trainer({"--config", name + ".yaml", "--predict-only", "--checkpoint", "last"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // cases/<id>/prediction of runs/<name>/predictions/val.h5.
  torch::Tensor prediction(const std::string& name, const std::string& id, torch::ScalarType dtype) {
    const std::string path = (dir / "runs" / name / "predictions" / "val.h5").string();
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    EXPECT_GE(f, 0) << path;
    const torch::Tensor t = h5::read_tensor(f, "cases/" + id + "/prediction", dtype, path);
    H5Fclose(f);
    return t;
  }
};

TEST_F(DicomCli, SphereAndAnalyticDoseComeBackOnTheCtGrid) {
  write("export", "P1", "--extra-plan --uids " + (dir / "uids.json").string());
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader ds((dir / "x.h5").string());
  EXPECT_EQ(ds.info().channel_names, (std::vector<std::string>{"CT", "Sphere"}));
  EXPECT_EQ(ds.info().target_units, "Gy");
  const CaseData c = ds.read_case("P1");
  ASSERT_EQ(c.image.sizes(), (std::vector<int64_t>{2, kSlices, kRows, kCols}));
  EXPECT_NEAR(c.spacing[0], kSliceStep, 1e-6);
  EXPECT_NEAR(c.spacing[1], kRowStep, 1e-6);
  EXPECT_NEAR(c.spacing[2], kColStep, 1e-6);
  // HU = i + 2 j + 3 k - 1024: slices by position (InstanceNumber is reversed), rescale applied.
  const auto ct = c.image[0];
  for (const auto& [k, j, i] : std::vector<std::array<int64_t, 3>>{{0, 0, 0}, {5, 7, 3}, {23, 47, 39}}) {
    EXPECT_EQ(ct[k][j][i].item<float>(), static_cast<float>(i + 2 * j + 3 * k - 1024)) << k << "," << j << "," << i;
  }
  const torch::Tensor sphere = expected_sphere();
  EXPECT_GT(sphere.sum().item<int64_t>(), 1000);
  EXPECT_GE(dice(c.image[1], sphere), 0.98);
  // dose(x, y, z) = A + B . (x, y, z) at every CT voxel centre, within 1%.
  const auto truth = analytic_dose();
  ASSERT_TRUE(c.target.defined());
  EXPECT_LT(((c.target.to(torch::kFloat64) - truth).abs() / truth).max().item<double>(), 0.01);
  ASSERT_TRUE(c.source.has_value());
  EXPECT_EQ(c.source->format, "dicom");
  EXPECT_DOUBLE_EQ(c.source->affine[3], kOrigin[0]);  // voxel (0, 0, 0) at the first slice's position
  EXPECT_DOUBLE_EQ(c.source->affine[11], kOrigin[2]);
  // Provenance: the UIDs of what was read; the RT Plan the RT Dose references (not the extra 60 Gy one)
  // gives the prescription, and is listed after the series, the RT Structure Set and the RT Dose.
  const auto uids = nlohmann::json::parse(test::read_text(dir / "uids.json"));
  for (const char* key : {"study", "series", "frame_of_reference", "rtstruct", "rtdose", "rtplan"}) {
    const std::string name = fmt::format("source_{}_uid", key);
    EXPECT_EQ(case_attribute("x.h5", "P1", name), uids[key].get<std::string>()) << name;
  }
  EXPECT_DOUBLE_EQ(prescription("x.h5", "P1"), 70.0);
  ASSERT_EQ(c.source->files.size(), static_cast<size_t>(kSlices + 3));
  EXPECT_EQ(fs::path(c.source->files.back()).filename(), "rtplan.dcm");
}

// An RT Dose whose frames run against the normal (GridFrameOffsetVector 0, -3, -6, ...) lands the same.
TEST_F(DicomCli, DoseFramesStackedAgainstTheNormal) {
  write("export", "P1", "--dose-descending");
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CaseData c = DatasetReader((dir / "x.h5").string()).read_case("P1");
  const auto truth = analytic_dose();
  EXPECT_LT(((c.target.to(torch::kFloat64) - truth).abs() / truth).max().item<double>(), 0.01);
}

TEST_F(DicomCli, ShuffledNamesNestedFoldersAndTwoPatientsGiveTheSameCase) {
  write("plain", "P1");
  write("mixed", "P1", "--shuffle 7 --nested");
  write("mixed", "P2", "--shuffle 8 --nested");
  ASSERT_EQ(trainer({"import", "dicom", "--source", "plain", "--out", "a.h5"}).exit_code, 0);
  const auto r = trainer({"import", "dicom", "--source", "mixed", "--out", "b.h5", "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader a((dir / "a.h5").string()), b((dir / "b.h5").string());
  EXPECT_EQ(b.info().case_ids, (std::vector<std::string>{"P1", "P2"}));
  const CaseData x = a.read_case("P1"), y = b.read_case("P1");
  EXPECT_TRUE(torch::equal(x.image, y.image));
  EXPECT_TRUE(torch::equal(x.target, y.target));
  EXPECT_TRUE(torch::equal(y.image, b.read_case("P2").image));
}

TEST_F(DicomCli, SegmentationThroughAStructureMap) {
  write("export", "P1");
  test::write_text(dir / "map.yaml", "Ball: [ball, ' SPHERE ']\nLiver: [liver]\n");
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--task", "segmentation",
                          "--structures", "map.yaml", "--anonymize", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("missing channels [Liver]"), std::string::npos) << r.output;
  DatasetReader ds((dir / "x.h5").string());
  EXPECT_EQ(ds.info().class_names, (std::vector<std::string>{"background", "Ball", "Liver"}));
  EXPECT_EQ(ds.info().case_ids, (std::vector<std::string>{"case_000"}));
  const CaseData c = ds.read_case("case_000");
  EXPECT_GE(dice(c.target == 1, expected_sphere()), 0.98);
  EXPECT_TRUE(c.source->files.empty());  // --anonymize writes no paths and no UIDs
  EXPECT_EQ(case_attribute("x.h5", "case_000", "source_study_uid"), "");
  EXPECT_DOUBLE_EQ(prescription("x.h5", "case_000"), 70.0);
}

// DICOM SEG (highdicom, binary and fractional): segments become classes through the structure map,
// voxel for voxel; frames of empty slices are left out by the writer; the SEG's UID is recorded.
TEST_F(DicomCli, DicomSegSegmentsBecomeLabelsVoxelForVoxel) {
  torch::Tensor box = torch::zeros({kSlices, kRows, kCols}, torch::kUInt8);
  box.slice(0, 2, 6).slice(1, 2, 10).slice(2, 2, 10).fill_(1);  // write_dicom.py's BOX
  const torch::Tensor sphere = expected_sphere();
  test::write_text(dir / "map.yaml", "Ball: [sphere]\nBlock: [BOX]\n");
  for (const std::string kind : {"binary", "fractional"}) {
    SCOPED_TRACE(kind);
    write(kind, "P1", "--no-rt --seg " + kind + " --uids " + (dir / (kind + ".json")).string());
    const auto r = trainer({"import", "dicom", "--source", kind, "--out", kind + ".h5", "--task", "segmentation",
                            "--structures", "map.yaml", "--val-fraction", "0"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    DatasetReader ds((dir / (kind + ".h5")).string());
    EXPECT_EQ(ds.info().class_names, (std::vector<std::string>{"background", "Ball", "Block"}));
    EXPECT_EQ(ds.split("train"), (std::vector<std::string>{"P1"}));  // labelled by the SEG alone
    const CaseData c = ds.read_case("P1");
    EXPECT_TRUE(torch::equal((c.target == 1).to(torch::kUInt8), sphere));
    EXPECT_TRUE(torch::equal((c.target == 2).to(torch::kUInt8), box));
    const auto uids = nlohmann::json::parse(test::read_text(dir / (kind + ".json")));
    EXPECT_EQ(case_attribute(kind + ".h5", "P1", "source_seg_uid"), uids["seg"].get<std::string>());
  }
  // Without a map, every segment label is a class of its own (sorted).
  ASSERT_EQ(trainer({"import", "dicom", "--source", "binary", "--out", "all.h5", "--task", "segmentation"}).exit_code,
            0);
  EXPECT_EQ(DatasetReader((dir / "all.h5").string()).info().class_names,
            (std::vector<std::string>{"background", "Box", "Sphere"}));
  // A frame half a pixel off the series' grid: one line naming the patient and the file, nothing written.
  const fs::path seg = dir / "binary" / "P1" / "seg.dcm";
  const std::string shift = python_->string() + " -c \"import pydicom; d = pydicom.dcmread('" + seg.string() +
                            "'); p = d.PerFrameFunctionalGroupsSequence[0].PlanePositionSequence[0]; "
                            "p.ImagePositionPatient = [float(p.ImagePositionPatient[0]) + 0.6] + "
                            "list(p.ImagePositionPatient[1:]); d.save_as('" +
                            seg.string() + "')\"";
  ASSERT_EQ(std::system(shift.c_str()), 0) << shift;
  const auto r = trainer({"import", "dicom", "--source", "binary", "--out", "off.h5", "--task", "segmentation"});
  expect_one_error(r, "patient P1, series");
  EXPECT_NE(r.output.find("seg.dcm: frame 1 at (-29.40, "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "off.h5"));
}

TEST_F(DicomCli, AMissingSliceIsOneLineOrASkippedPatient) {
  write("export", "P1");
  write("export", "P2");
  fs::remove(dir / "export/P2/ct/ct_010.dcm");
  expect_one_error(trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--strict"}),
                   "patient P2, series");
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("uneven slice spacing"), std::string::npos) << r.output;
  EXPECT_EQ(DatasetReader((dir / "x.h5").string()).info().case_ids, (std::vector<std::string>{"P1"}));
}

// Two image series of one patient: the one its RT Structure Set references, else --series, else one line.
TEST_F(DicomCli, SeveralCandidateSeriesAreChosenByReferenceOrSeries) {
  write("referenced", "P1");
  fs::rename(dir / "referenced/P1", dir / "referenced/first");
  write("referenced", "P1", "--no-rt");  // a second CT series (another study) without RT objects
  auto r = trainer({"import", "dicom", "--source", "referenced", "--out", "a.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(DatasetReader((dir / "a.h5").string()).info().splits.at("train"), (std::vector<std::string>{"P1"}));
  write("plain", "P1", "--no-rt");
  fs::rename(dir / "plain/P1", dir / "plain/first");
  write("plain", "P1", "--no-rt");
  r = trainer({"import", "dicom", "--source", "plain", "--out", "b.h5"});
  expect_one_error(r, "patient P1: 2 candidate image series (");
  EXPECT_NE(r.output.find("choose one with --series UID"), std::string::npos) << r.output;
  const size_t open = r.output.find("series (") + 8;
  const std::string uid = r.output.substr(open, r.output.find(',', open) - open);
  r = trainer({"import", "dicom", "--source", "plain", "--out", "b.h5", "--series", uid});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(DatasetReader((dir / "b.h5").string()).split("test"), (std::vector<std::string>{"P1"}));
}

// pydicom's shipped sample files, each alone in a folder: imported, or refused with one line.
TEST_F(DicomCli, PydicomSampleFilesImportOrAreRefusedInOneLine) {
  const std::string find = python_->string() +
                           " -c \"import pydicom.data, os; print(os.path.dirname(pydicom.data.get_testdata_file("
                           "'CT_small.dcm')))\" > " +
                           (dir / "where.txt").string();
  ASSERT_EQ(std::system(find.c_str()), 0) << "pydicom is missing from the venv: run scripts/setup.sh";
  std::string where = test::read_text(dir / "where.txt");
  while (!where.empty() && (where.back() == '\n' || where.back() == '\r')) where.pop_back();
  struct Sample {
    const char* file;
    bool imports;
    const char* reason;  // of a refusal
  };
  // The MR_small variants (RLE, JPEG-LS, JPEG 2000, big endian, implicit VR) decode to MR_small's voxels.
  std::map<std::string, torch::Tensor> images;
  for (const Sample& s :
       {Sample{"CT_small.dcm", true, ""}, Sample{"MR_small.dcm", true, ""}, Sample{"MR_small_RLE.dcm", true, ""},
        Sample{"MR_small_jpeg_ls_lossless.dcm", true, ""}, Sample{"MR_small_bigendian.dcm", true, ""},
        Sample{"MR_small_implicit.dcm", true, ""}, Sample{"MR_small_jp2klossless.dcm", true, ""},
        Sample{"JPEG2000.dcm", false, "no CT or MR image series (found: NM)"},
        Sample{"rtstruct.dcm", false, "no CT or MR image series (found: RTSTRUCT)"},
        Sample{"rtdose.dcm", false, "no CT or MR image series (found: RTDOSE)"}}) {
    SCOPED_TRACE(s.file);
    const fs::path folder = dir / (std::string("in_") + s.file);
    fs::create_directories(folder);
    fs::copy_file(fs::path(where) / s.file, folder / s.file);
    const auto r = trainer({"import", "dicom", "--source", folder.string(), "--out", std::string(s.file) + ".h5"});
    if (s.imports) {
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const DatasetReader ds((dir / (std::string(s.file) + ".h5")).string());
      ASSERT_EQ(ds.split("test").size(), 1u);  // no RT Dose: a case to predict
      images[s.file] = ds.read_case(ds.split("test")[0]).image;
      EXPECT_EQ(images[s.file].size(1), 1);
    } else {
      expect_one_error(r, s.reason);
    }
  }
  for (const char* variant : {"MR_small_RLE.dcm", "MR_small_jpeg_ls_lossless.dcm", "MR_small_jp2klossless.dcm",
                              "MR_small_bigendian.dcm", "MR_small_implicit.dcm"}) {
    EXPECT_TRUE(torch::equal(images[variant], images["MR_small.dcm"])) << variant;
  }
  EXPECT_GT(images["MR_small.dcm"].std().item<double>(), 0);
}

// Back to DICOM: a dose model trained on two imported patients predicts the validation patient,
// and --predict-only writes predictions/val/<case>.dcm, an RT Dose that pydicom
// (tests/python/read_rtdose.py) reads at the CT's position, orientation and spacing, in the CT's
// patient, study and frame of reference, with the predicted values (within DoseGridScaling).
TEST_F(DicomCli, PredictedDoseGoesBackAsAnRtDoseOnTheSourceCt) {
  write("export", "P1");
  write("export", "P2");
  auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NO_FATAL_FAILURE(train_one_step_and_predict("rt"));
  const std::string id = DatasetReader((dir / "x.h5").string()).split("val").at(0);
  const fs::path rtdose = dir / "runs" / "rt" / "predictions" / "val" / (id + ".dcm");
  ASSERT_TRUE(fs::exists(rtdose)) << r.output;
  const std::string cmd = python_->string() + " " + (test::source_dir() / "tests/python/read_rtdose.py").string() +
                          " " + rtdose.string() + " " + (dir / "export" / id / "ct" / "ct_000.dcm").string() + " " +
                          (dir / "dose.f32").string() + " > " + (dir / "rtdose.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto j = nlohmann::json::parse(test::read_text(dir / "rtdose.json"));
  EXPECT_EQ(j["sop_class"], "1.2.840.10008.5.1.4.1.1.481.2");
  EXPECT_EQ(j["modality"], "RTDOSE");
  EXPECT_TRUE(j["same_patient"].get<bool>());
  EXPECT_TRUE(j["same_study"].get<bool>());
  EXPECT_TRUE(j["same_frame_of_reference"].get<bool>());
  EXPECT_TRUE(j["new_series"].get<bool>());
  EXPECT_EQ(j["shape"], nlohmann::json::array({kSlices, kRows, kCols}));
  for (int a = 0; a < 3; ++a) EXPECT_NEAR(j["position"][a].get<double>(), kOrigin[a], 1e-6);
  EXPECT_EQ(j["orientation"], nlohmann::json::array({1.0, 0.0, 0.0, 0.0, 1.0, 0.0}));
  EXPECT_EQ(j["pixel_spacing"], nlohmann::json::array({kRowStep, kColStep}));
  ASSERT_EQ(j["offsets"].size(), static_cast<size_t>(kSlices));
  for (int64_t k = 0; k < kSlices; ++k) EXPECT_NEAR(j["offsets"][k].get<double>(), k * kSliceStep, 1e-6);
  EXPECT_EQ(j["frame_increment_pointer"], "(3004,000C)");
  EXPECT_EQ(j["units"], "GY");
  EXPECT_EQ(j["referenced_plan"], case_attribute("x.h5", id, "source_rtplan_uid"));
  EXPECT_NE(j["referenced_plan"], "");
  // The values: the prediction in val.h5, as pydicom scales the pixels back.
  const torch::Tensor predicted = prediction("rt", id, torch::kFloat64);
  const std::string raw = test::read_text(dir / "dose.f32");
  ASSERT_EQ(raw.size(), static_cast<size_t>(kSlices * kRows * kCols * 4));
  const torch::Tensor read =
      torch::from_blob(const_cast<char*>(raw.data()), {kSlices, kRows, kCols}, torch::kFloat32).to(torch::kFloat64);
  const double scaling = j["scaling"].get<double>();
  EXPECT_GT(predicted.max().item<double>(), 0);
  EXPECT_LE((read - predicted.clamp_min(0)).abs().max().item<double>(),
            scaling + 1e-6 * predicted.abs().max().item<double>());
}

// `trainer predict -i EXPORT -o OUT --run RUN` on a planning system's export folder, with no import and
// no config: an RT Dose per patient, equal to --predict-only's for the same case and referencing its plan.
TEST_F(DicomCli, PredictIOnAnExportFolderWritesAnRtDosePerPatient) {
  write("export", "P1");
  write("export", "P2");
  ASSERT_EQ(trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0.5"}).exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(train_one_step_and_predict("rt"));
  const auto r = trainer({"predict", "-i", "export", "-o", "out", "--run", "runs/rt", "--checkpoint", "last"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> written;
  for (const auto& e : fs::directory_iterator(dir / "out")) written.push_back(e.path().filename().string());
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"P1.dcm", "P2.dcm"}));
  const std::string id = DatasetReader((dir / "x.h5").string()).split("val").at(0);
  const auto read = [&](const fs::path& rtdose, const std::string& tag) {
    const std::string cmd = python_->string() + " " + (test::source_dir() / "tests/python/read_rtdose.py").string() +
                            " " + rtdose.string() + " " + (dir / "export" / id / "ct" / "ct_000.dcm").string() + " " +
                            (dir / (tag + ".f32")).string() + " > " + (dir / (tag + ".json")).string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return nlohmann::json::parse(test::read_text(dir / (tag + ".json")));
  };
  const auto a = read(dir / "out" / (id + ".dcm"), "raw");
  const auto b = read(dir / "runs" / "rt" / "predictions" / "val" / (id + ".dcm"), "config");
  EXPECT_TRUE(a["same_study"].get<bool>() && a["same_frame_of_reference"].get<bool>()) << a;
  for (const char* key : {"position", "orientation", "pixel_spacing", "offsets", "shape", "scaling"}) {
    EXPECT_EQ(a[key], b[key]) << key;
  }
  EXPECT_EQ(test::read_text(dir / "raw.f32"), test::read_text(dir / "config.f32"));  // the same dose, bit for bit
  EXPECT_EQ(a["referenced_plan"], case_attribute("x.h5", id, "source_rtplan_uid"));
  // A dose run's raw inputs are a DICOM export: NIfTI files are refused in one line.
  fs::create_directories(dir / "nifti");
  test::write_text(dir / "nifti" / "c_0000.nii.gz", "");
  const auto n = trainer({"predict", "-i", "nifti", "-o", "out2", "--run", "runs/rt"});
  EXPECT_EQ(n.exit_code, 2) << n.output;
  EXPECT_NE(n.output.find("is a dose run; its raw inputs are a DICOM export folder"), std::string::npos) << n.output;
}

// Labels back to DICOM: a sphere with a hollow core (a hole in its middle slices) and a second
// label written as an RT Structure Set on the imported CT (write_rtstruct), then read by rt-utils
// (tests/python/read_rtstruct.py) on the CT series, and by `trainer import dicom`: the same voxels.
// Then the CLI path: a
// segmentation model trained one step writes predictions/val/<case>.dcm whose ROIs rt-utils reads
// back as the predicted labels.
TEST_F(DicomCli, LabelsGoBackAsAnRtStructureSetThatRtUtilsReadsBack) {
  write("export", "P1");
  write("export", "P2");
  test::write_text(dir / "map.yaml", "Ball: [Sphere]\n");
  auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--task", "segmentation", "--structures",
                    "map.yaml", "--val-fraction", "0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  DatasetReader ds((dir / "x.h5").string());
  const CaseData c = ds.read_case("P1");
  ASSERT_TRUE(c.source.has_value());
  torch::Tensor labels = c.target.clone();
  labels.masked_fill_(
      labels.eq(1) & torch::roll(labels.eq(1), {3, 3}, {1, 2}) & torch::roll(labels.eq(1), {-3, -3}, {1, 2}), 0);
  labels.slice(0, 2, 6).slice(1, 5, 12).slice(2, 4, 9).fill_(2);
  ASSERT_GT(labels.eq(1).sum().item<int64_t>(), 100);
  write_rtstruct(dir / "rs.dcm", labels, *c.source, {"Ball", "Box"}, "test");
  const auto read_back = [&](const fs::path& rs, const std::string& id) {
    const std::string cmd = python_->string() + " " + (test::source_dir() / "tests/python/read_rtstruct.py").string() +
                            " " + (dir / "export" / id / "ct").string() + " " + rs.string() + " " +
                            (dir / "roi").string() + " > " + (dir / "rs.json").string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << test::read_text(dir / "rs.json");
    const auto j = nlohmann::json::parse(test::read_text(dir / "rs.json"));
    std::vector<torch::Tensor> masks;
    for (size_t k = 0; k < j["names"].size(); ++k) {
      const std::string raw = test::read_text(dir / ("roi" + std::to_string(k) + ".u8"));
      EXPECT_EQ(raw.size(), static_cast<size_t>(kSlices * kRows * kCols));
      masks.push_back(torch::from_blob(const_cast<char*>(raw.data()), {kSlices, kRows, kCols}, torch::kUInt8).clone());
    }
    return std::pair{j["names"].get<std::vector<std::string>>(), masks};
  };
  auto [names, masks] = read_back(dir / "rs.dcm", "P1");
  ASSERT_EQ(names, (std::vector<std::string>{"Ball", "Box"}));
  const auto differ = [](const torch::Tensor& read, const torch::Tensor& truth) {
    return fmt::format("{} of {} voxels differ (read {}, written {})", read.ne(truth).sum().item<int64_t>(),
                       read.numel(), read.sum().item<int64_t>(), truth.sum().item<int64_t>());
  };
  EXPECT_TRUE(torch::equal(masks[0], labels.eq(1).to(torch::kUInt8)))
      << "the hollow ball: " << differ(masks[0], labels.eq(1).to(torch::kUInt8));
  EXPECT_TRUE(torch::equal(masks[1], labels.eq(2).to(torch::kUInt8)))
      << "the box: " << differ(masks[1], labels.eq(2).to(torch::kUInt8));
  // And through trainer's own importer: the CT with the written RT Structure Set gives the labels back.
  fs::create_directories(dir / "back");
  fs::copy(dir / "export" / "P1" / "ct", dir / "back" / "ct");
  fs::copy_file(dir / "rs.dcm", dir / "back" / "rs.dcm");
  test::write_text(dir / "back.yaml", "Ball: [Ball]\nBox: [Box]\n");
  r = trainer({"import", "dicom", "--source", "back", "--out", "back.h5", "--task", "segmentation", "--structures",
               "back.yaml", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const torch::Tensor reimported = DatasetReader((dir / "back.h5").string()).read_case("P1").target;
  EXPECT_TRUE(torch::equal(reimported, labels)) << reimported.ne(labels).sum().item<int64_t>() << " voxels differ";

  ASSERT_NO_FATAL_FAILURE(train_one_step_and_predict("seg"));
  const std::string id = ds.split("val").at(0);
  const fs::path rs = dir / "runs" / "seg" / "predictions" / "val" / (id + ".dcm");
  ASSERT_TRUE(fs::exists(rs)) << r.output;
  const torch::Tensor predicted = prediction("seg", id, torch::kUInt8);
  std::tie(names, masks) = read_back(rs, id);
  ASSERT_EQ(names, (std::vector<std::string>{"Ball"}));
  EXPECT_TRUE(torch::equal(masks[0], predicted.eq(1).to(torch::kUInt8)))
      << "the prediction: " << differ(masks[0], predicted.eq(1).to(torch::kUInt8));
}

}  // namespace
}  // namespace u3d
