// Issue 54, item 5: compressed DICOM pixel data. tests/python/write_dicom_syntaxes.py writes a small CT
// series in each transfer syntax it can (uncompressed little and big endian, implicit VR, RLE, JPEG-LS,
// JPEG baseline, JPEG 2000 lossless and lossy, a JP2 file as the frame, HTJ2K's UID over a Part 1 codestream) and takes
// pydicom's own test files that a CT/MR import can read; each is imported with the real `trainer import dicom` and
// compared voxel for voxel with pydicom's decode in the venv (lossy ones too: the same codestream decoded by pydicom).
// docs/dicom.md, and docs/reliability.md ("Round 3: DICOM").
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "dicom_writer.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

class DicomSyntax : public test::DicomWriterCli {
 protected:
  // The writer's output under dir/syntaxes, and its manifest.
  nlohmann::json write_all(const std::string& extra = "") {
    run_script("write_dicom_syntaxes.py", (dir / "syntaxes").string() + extra);
    return nlohmann::json::parse(test::read_text(dir / "syntaxes/manifest.json"));
  }
};

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

TEST_F(DicomSyntax, EveryTransferSyntaxImportsAsPydicomDecodesIt) {
  const nlohmann::json manifest = write_all();
  if (HasFatalFailure()) return;
  std::set<std::string> syntaxes, lossy;
  std::map<std::string, std::string> outputs;  // folder -> imported dataset
  for (const auto& s : manifest["series"]) {
    const std::string folder = s["folder"].get<std::string>(), name = s["name"].get<std::string>();
    SCOPED_TRACE(name);
    if (!outputs.count(folder)) {  // one import per folder: the written series are patients of one folder
      const std::string out = "import_" + std::to_string(outputs.size()) + ".h5";
      const auto r = trainer({"import", "dicom", "--source", (dir / "syntaxes" / folder).string(), "--out", out});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(r.output.find("left out"), std::string::npos) << r.output;
      outputs[folder] = out;
    }
    const DatasetReader ds((dir / outputs[folder]).string());
    const std::string id = s["case"].get<std::string>().empty() ? ds.split("test").at(0) : s["case"].get<std::string>();
    const torch::Tensor image = ds.read_case(id).image;  // (1, D, H, W)
    const std::vector<int64_t> shape = s["shape"].get<std::vector<int64_t>>();
    const std::string raw = test::read_text(dir / "syntaxes" / (name + ".f32"));
    torch::Tensor expected = torch::empty(shape, torch::kFloat32);
    ASSERT_EQ(raw.size(), static_cast<size_t>(expected.numel()) * sizeof(float));
    std::memcpy(expected.data_ptr<float>(), raw.data(), raw.size());
    ASSERT_EQ(image.sizes(), expected.unsqueeze(0).sizes());
    EXPECT_TRUE(torch::equal(image[0], expected))
        << "largest difference " << (image[0] - expected).abs().max().item<float>() << " (syntax "
        << s["syntax"].get<std::string>() << ")";
    EXPECT_GT(expected.std().item<double>(), 0);
    syntaxes.insert(s["syntax"].get<std::string>());
    if (!s["lossless"].get<bool>()) lossy.insert(name);
  }
  for (const char* uid : {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2", "1.2.840.10008.1.2.5",
                          "1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.80", "1.2.840.10008.1.2.4.90",
                          "1.2.840.10008.1.2.4.91", "1.2.840.10008.1.2.4.203"}) {
    EXPECT_TRUE(syntaxes.count(uid)) << uid << " was not compared";
  }
  // pydicom's JPEG 2000 samples: lossless MR, lossy CT and a CT whose codestream is unsigned while
  // PixelRepresentation says signed (read as signed, as pydicom does).
  for (const char* sample : {"MR_small_jp2klossless.dcm", "693_J2KI.dcm", "J2K_pixelrep_mismatch.dcm"}) {
    EXPECT_EQ(count(manifest.dump(), std::string("\"") + sample + "\""), 1u) << sample << " was not compared";
  }
  EXPECT_TRUE(lossy.count("j2k_lossy") && lossy.count("693_J2KI.dcm"));
  EXPECT_EQ(count(manifest.dump(), "\"j2k_jp2_file\""), 2u);  // its name and its case
}

// A JPEG 2000 frame of 16 x 16 in a slice whose Rows x Columns say 32 x 24, and a codestream short of its
// last 300 bytes: both patients refused, each naming its file and what is wrong; one error line, nothing
// written.
TEST_F(DicomSyntax, AJpeg2000FrameOfAnotherSizeOrTruncatedIsRefusedNamingTheFile) {
  const nlohmann::json manifest = write_all(" --forged-only");
  if (HasFatalFailure()) return;
  const auto r = trainer({"import", "dicom", "--source", (dir / "syntaxes/forged").string(), "--out", "x.h5"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count(r.output, "[error]"), 1u) << r.output;
  const size_t at = r.output.find("[error]");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find(manifest["forged"]["ct_16x16"].get<std::string>() +
                      "): JPEG 2000 frame: decodes to 1 component(s) of 16 rows x 16 columns at 16 bits; "
                      "the data set declares 1 sample of 32 rows x 24 columns in 16 bits allocated"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(manifest["forged"]["ct_truncated"].get<std::string>() +
                      "): JPEG 2000 frame: OpenJPEG cannot decode it ("),
            std::string::npos)
      << line;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
}

}  // namespace
}  // namespace u3d
