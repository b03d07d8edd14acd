// Issue 54, round 3 of hardening: DICOM as exports really come. Bare data sets without file meta,
// elements kept with VR UN, an RT Structure Set on a series not in the folder, an ROI entirely off the
// image, bad structure maps, and a folder where one patient of several is unusable. The files are
// written by tests/python/write_dicom.py (pydicom, rt-utils) in the torch venv; every case runs the
// real `trainer` binary. docs/reliability.md ("Round 3: DICOM") lists each class with its test.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "dicom_writer.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

class DicomHardening : public test::DicomWriterCli {};

// Item 3: no preamble, no file meta, implicit VR little endian: read, and said so in one line.
TEST_F(DicomHardening, BareDatasetsWithoutFileMetaAreReadAndCounted) {
  write("plain", "P1");
  write("bare", "P1", "--bare");
  ASSERT_FALSE(test::read_text(dir / "bare/P1/rtdose.dcm").substr(128, 4) == "DICM");
  ASSERT_EQ(trainer({"import", "dicom", "--source", "plain", "--out", "a.h5", "--val-fraction", "0"}).exit_code, 0);
  const auto r = trainer({"import", "dicom", "--source", "bare", "--out", "b.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "27 file(s) under bare without DICOM file meta read as bare datasets"), 1u)
      << r.output;
  const CaseData a = DatasetReader((dir / "a.h5").string()).read_case("P1");
  const CaseData b = DatasetReader((dir / "b.h5").string()).read_case("P1");
  EXPECT_TRUE(torch::equal(a.image, b.image));
  EXPECT_TRUE(torch::equal(a.target, b.target));
  const auto plain = trainer({"import", "dicom", "--source", "plain", "--out", "c.h5"});
  EXPECT_EQ(plain.output.find("bare datasets"), std::string::npos) << plain.output;
}

// Item 2: PatientID, Modality, DoseUnits and DoseGridScaling of the RT Dose stored with VR UN.
TEST_F(DicomHardening, ElementsWithVrUnAreDecodedThroughTheDictionary) {
  write("plain", "P1");
  write("un", "P1", "--un-dose");
  ASSERT_EQ(trainer({"import", "dicom", "--source", "plain", "--out", "a.h5", "--val-fraction", "0"}).exit_code, 0);
  const auto r = trainer({"import", "dicom", "--source", "un", "--out", "b.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("50\\31"), std::string::npos) << r.output;  // "P1" as hex bytes
  DatasetReader b((dir / "b.h5").string());
  EXPECT_EQ(b.info().case_ids, (std::vector<std::string>{"P1"}));
  EXPECT_EQ(b.split("train"), (std::vector<std::string>{"P1"}));  // the RT Dose is recognised: a target
  const CaseData x = DatasetReader((dir / "a.h5").string()).read_case("P1"), y = b.read_case("P1");
  ASSERT_TRUE(y.target.defined());
  EXPECT_TRUE(torch::allclose(x.target, y.target));
}

// Item 9a: an RT Structure Set drawn on a series the folder lacks is named, with that series.
TEST_F(DicomHardening, AnRtStructOnASeriesNotInTheFolderIsAWarning) {
  write("export", "P1", "--struct-elsewhere --uids " + (dir / "uids.json").string());
  const auto uids = nlohmann::json::parse(test::read_text(dir / "uids.json"));
  const std::string ref = uids["rtstruct_referenced_series"].get<std::string>();
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("[warning] import dicom: patient P1: RT Structure Set ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("rtstruct.dcm references series " + ref + ", which is not in the folder"), std::string::npos)
      << line;
}

// Item 9b: an ROI 500 mm to the side of the CT: a warning naming the ROI and the patient.
TEST_F(DicomHardening, AnRoiEntirelyOffTheImageIsAWarning) {
  write("export", "P1", "--far-roi");
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--val-fraction", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[warning] import dicom: patient P1, series "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("structure 'Far': its "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("contour(s) lie entirely off the image"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("structure 'Sphere': its"), std::string::npos) << r.output;
}

// Item 9c: structure maps with a key twice, an empty key, an image channel's name, a number for names,
// and wrong types: a list or text where the map is expected, a map, a list or nothing where a name is.
TEST_F(DicomHardening, BadStructureMapsAreRefusedNamingTheFileAndTheKey) {
  write("export", "P1");
  struct Bad {
    const char* yaml;
    const char* says;
    bool both_tasks = true;  // the wrong types are read before the task matters: one task is enough
  };
  for (const Bad& b : {Bad{"Ball: [Sphere]\nBall: [ball]\n", "channel 'Ball' is given twice"},
                       Bad{"Ball: [Sphere]\n'': [x]\n", "an empty channel name (key '')"},
                       Bad{"Ball: [Sphere]\nCT: [body]\n", "channel 'CT' is named like the image channel"},
                       Bad{"Ball: 70\n", "'Ball': '70' is a number; expected a structure name or a list of names"},
                       Bad{"Ball: [Sphere, 5]\n", "'Ball': '5' is a number"},
                       Bad{"- Ball\n- Sphere\n", "expected a map 'channel: [structure names]'", false},
                       Bad{"just text\n", "expected a map 'channel: [structure names]'", false},
                       Bad{"Ball: {name: Sphere}\n", "'Ball' is a map; expected a structure name or a list", false},
                       Bad{"Ball:\n", "'Ball' is empty; expected a structure name or a list of names", false},
                       Bad{"Ball: [[Sphere]]\n", "'Ball': an entry of its list is a list; expected a structure", false},
                       Bad{"Ball: [{a: Sphere}]\n", "'Ball': an entry of its list is a map; expected a", false},
                       Bad{"[Ball]: Sphere\n", "a key is a list; expected a channel name", false},
                       Bad{"{a: 1}: Sphere\n", "a key is a map; expected a channel name", false}}) {
    SCOPED_TRACE(b.yaml);
    test::write_text(dir / "map.yaml", b.yaml);
    for (const char* task : {"dose", "segmentation"}) {
      if (!b.both_tasks && std::string(task) == "segmentation") continue;
      const auto r = trainer(
          {"import", "dicom", "--source", "export", "--out", "x.h5", "--task", task, "--structures", "map.yaml"});
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_NE(r.output.find("map.yaml: " + std::string(b.says)), std::string::npos) << r.output;
      EXPECT_EQ(occurrences(r.output, "[error]"), 1u) << r.output;
      EXPECT_FALSE(fs::exists(dir / "x.h5"));
    }
  }
  test::write_text(dir / "map.yaml", "Ball: [Sphere, '5']\n");  // a quoted number is a name
  EXPECT_EQ(trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--structures", "map.yaml"}).exit_code,
            0);
}

// Item 4: three patients, two unusable: the usable one is imported and each other is one line (exit 0;
// --skip-bad is the same); --strict refuses (exit 1) naming both reasons and writes nothing.
TEST_F(DicomHardening, UnusablePatientsAreLeftOutOneLineEachOrRefusedWithStrict) {
  write("export", "P1");
  write("export", "P2");
  write("export", "P3");
  fs::remove(dir / "export/P2/ct/ct_010.dcm");  // uneven slice spacing: found when its case is read
  fs::remove_all(dir / "export/P3/ct");         // no image series: found when its case is planned
  for (const char* alias : {"", "--skip-bad"}) {
    SCOPED_TRACE(alias);
    std::vector<std::string> args = {"import", "dicom",          "--source", "export", "--out",
                                     "x.h5",   "--val-fraction", "0",        "--force"};
    if (*alias) args.push_back(alias);
    const auto r = trainer(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(DatasetReader((dir / "x.h5").string()).info().case_ids, (std::vector<std::string>{"P1"}));
    EXPECT_EQ(occurrences(r.output, "[warning] import dicom: left out: patient P2, series "), 1u) << r.output;
    EXPECT_NE(r.output.find("uneven slice spacing"), std::string::npos) << r.output;
    EXPECT_EQ(occurrences(r.output, "[warning] import dicom: left out: patient P3: no CT or MR image series"), 1u)
        << r.output;
    EXPECT_NE(r.output.find("2 patient(s) left out"), std::string::npos) << r.output;
  }
  fs::remove(dir / "x.h5");
  const auto r = trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--strict"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(occurrences(r.output, "[error]"), 1u) << r.output;
  const size_t at = r.output.find("[error]");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("2 of 3 patient(s) unusable (--strict), nothing written"), std::string::npos) << line;
  EXPECT_NE(line.find("patient P2, series "), std::string::npos) << line;
  EXPECT_NE(line.find("patient P3: no CT or MR image series"), std::string::npos) << line;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
  EXPECT_EQ(trainer({"import", "dicom", "--source", "export", "--out", "x.h5", "--strict", "--skip-bad"}).exit_code, 2);
}

}  // namespace
}  // namespace u3d
