// OpenKBP CSV parsing, import into dataset format v1 (round trip on the real sample), and the
// submission format.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/openkbp/openkbp.h"
#include "u3d/predict/openkbp_submission.h"

namespace u3d {
namespace {

using openkbp::CsvKind;

std::string data_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a DataError";
  return "";
}

// An independent reading of a challenge CSV (getline + strtod), to check the library against.
struct PlainCsv {
  std::vector<int64_t> indices;
  std::vector<double> values;
};
PlainCsv plain_csv(const fs::path& path) {
  PlainCsv out;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto comma = line.find(',');
    out.indices.push_back(std::stoll(line.substr(0, comma)));
    const std::string v = line.substr(comma + 1);
    out.values.push_back(v.empty() ? 1.0 : std::strtod(v.c_str(), nullptr));
  }
  return out;
}

TEST(OpenKbpCsv, ParsesValuesMasksCrlfAndAFinalNewline) {
  const auto v = openkbp::parse_sparse_csv(",data\r\n5,1.5\r\n2097151,70\r\n", "dose.csv", CsvKind::kValues);
  EXPECT_EQ(v.indices, (std::vector<int32_t>{5, 2097151}));
  EXPECT_EQ(v.values, (std::vector<float>{1.5f, 70.0f}));
  const auto m = openkbp::parse_sparse_csv(",data\n0,\n7,", "PTV70.csv", CsvKind::kMask);
  EXPECT_EQ(m.indices, (std::vector<int32_t>{0, 7}));
  EXPECT_TRUE(m.values.empty());
  EXPECT_TRUE(openkbp::parse_sparse_csv(",data\n", "empty.csv", CsvKind::kMask).indices.empty());
}

TEST(OpenKbpCsv, EveryProblemNamesFileLineAndReason) {
  struct Case {
    std::string text;
    CsvKind kind;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"", CsvKind::kValues, "f.csv:1: empty file"},
      {"index,data\n1,2\n", CsvKind::kValues, "f.csv:1: header 'index,data' is not ',data'"},
      {",data\n1,2\n2097152,3\n", CsvKind::kValues, "f.csv:3: index 2097152 is outside the grid 0..2097151"},
      {",data\n-1,3\n", CsvKind::kValues, "f.csv:2: index -1 is outside the grid"},
      {",data\n1,2\nx,3\n", CsvKind::kValues, "f.csv:3: index 'x' is not an integer"},
      {",data\n1,2\n4,2\n1,5\n", CsvKind::kValues, "f.csv:4: index 1 appears twice (first on line 2)"},
      {",data\n1,nan\n", CsvKind::kValues, "f.csv:2: value nan is not finite"},
      {",data\n1,inf\n", CsvKind::kValues, "f.csv:2: value inf is not finite"},
      {",data\n1,abc\n", CsvKind::kValues, "f.csv:2: value 'abc' is not a number"},
      {",data\n1,\n", CsvKind::kValues, "f.csv:2: value '' is not a number"},
      {",data\n1\n", CsvKind::kValues, "f.csv:2: expected 'index,value'"},
      {",data\n1,\n\n2,\n", CsvKind::kMask, "f.csv:3: empty line"},
      {",data\n1,1\n", CsvKind::kMask, "f.csv:2: mask rows are 'index,' with an empty value"},
  };
  for (const auto& c : cases) {
    const auto msg = data_error([&] { openkbp::parse_sparse_csv(c.text, "f.csv", c.kind); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "text: " << c.text << "\nmessage: " << msg;
  }
  // A failed parse leaves no trace: the same indices parse fine afterwards.
  EXPECT_EQ(openkbp::parse_sparse_csv(",data\n1,2\n4,2\n", "g.csv", CsvKind::kValues).indices.size(), 2u);
}

TEST(OpenKbpCsv, VoxelDimensions) {
  test::TempDir dir;
  test::write_text(dir / "v.csv", "3.906000000000000139e+00\n3.906000000000000139e+00\n2.5e+00\n");
  const auto v = openkbp::read_voxel_dimensions(dir / "v.csv");
  EXPECT_DOUBLE_EQ(v[0], 3.906);
  EXPECT_DOUBLE_EQ(v[2], 2.5);
  test::write_text(dir / "bad.csv", "3.9\n-1\n2.5\n");
  EXPECT_NE(data_error([&] { openkbp::read_voxel_dimensions(dir / "bad.csv"); }).find("bad.csv:2: voxel size -1"),
            std::string::npos);
  test::write_text(dir / "short.csv", "3.9\n3.9\n");
  EXPECT_NE(data_error([&] { openkbp::read_voxel_dimensions(dir / "short.csv"); }).find("expected three voxel sizes"),
            std::string::npos);
}

TEST(OpenKbpCsv, SubmissionFileRoundTripKeepsPositiveMaskedVoxelsOnly) {
  test::TempDir dir;
  const auto g = openkbp::kGridSize;
  torch::Tensor dose = torch::zeros({g, g, g});
  dose[1][2][3] = 12.25f;  // index (1 * 128 + 2) * 128 + 3 = 16643, inside the mask
  dose[4][5][6] = -3.0f;   // negative: dropped
  dose[7][8][9] = 50.0f;   // outside the mask: dropped
  torch::Tensor mask = torch::zeros({g, g, g}, torch::kUInt8);
  mask[1][2][3] = 1;
  mask[4][5][6] = 1;
  openkbp::write_dose_csv(dir / "pt_1.csv", dose, mask);
  EXPECT_EQ(test::read_text(dir / "pt_1.csv"), ",data\n16643,12.25\n");
  const auto back = openkbp::read_dose_csv(dir / "pt_1.csv");
  EXPECT_EQ(back.sizes(), (torch::IntArrayRef{g, g, g}));
  EXPECT_FLOAT_EQ(back[1][2][3].item<float>(), 12.25f);
  EXPECT_FLOAT_EQ(back.sum().item<float>(), 12.25f);
}

TEST(OpenKbpCsv, SubmissionWriterReplacesThePreviousFolderWhole) {
  test::TempDir dir;
  const auto g = openkbp::kGridSize;
  const torch::Tensor dose = torch::full({g, g, g}, 1.0f);
  const torch::Tensor mask = torch::zeros({1, g, g, g}, torch::kUInt8);
  {
    openkbp::SubmissionWriter w(dir / "openkbp");
    w.write("pt_1", dose, mask);
    w.commit();
  }
  {
    openkbp::SubmissionWriter w(dir / "openkbp");
    w.write("pt_2", dose, mask);
    // No commit: the first run's folder stays as it was, the staging folder goes.
  }
  EXPECT_TRUE(fs::exists(dir / "openkbp" / "pt_1.csv"));
  {
    openkbp::SubmissionWriter w(dir / "openkbp");
    w.write("pt_2", dose, mask);
    w.commit();
  }
  EXPECT_FALSE(fs::exists(dir / "openkbp" / "pt_1.csv"));
  EXPECT_EQ(test::read_text(dir / "openkbp" / "pt_2.csv"), ",data\n");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "openkbp" ? 0 : 1;
  EXPECT_EQ(entries, 0) << "temporary folders left behind";
}

TEST(OpenKbpCsv, SubmissionWriterSkipsVolumesOffTheGrid) {
  test::TempDir dir;
  fs::create_directories(dir / "openkbp");
  test::write_text(dir / "openkbp" / "pt_1.csv", ",data\n");
  openkbp::SubmissionWriter w(dir / "openkbp");
  EXPECT_FALSE(w.write("pt_2", torch::ones({32, 32, 32}), torch::ones({32, 32, 32}, torch::kUInt8)));
  w.commit();  // nothing written: the previous folder stays
  EXPECT_EQ(w.files(), 0);
  EXPECT_TRUE(fs::exists(dir / "openkbp" / "pt_1.csv"));
  EXPECT_FALSE(fs::exists(dir / "openkbp" / "pt_2.csv"));
}

TEST(OpenKbpImport, FindsSplitsOfAProvidedDataFolderAndOfAPlainFolder) {
  test::TempDir dir;
  for (const auto& p : {"train-pats/pt_10", "train-pats/pt_2", "validation-pats/pt_201", "test-pats/pt_241"}) {
    fs::create_directories(dir / "provided-data" / p);
  }
  fs::create_directories(dir / "provided-data" / "train-pats" / "notes");  // not a patient
  const auto all = openkbp::find_patients(dir / "provided-data");
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].id, "pt_2");  // natural order
  EXPECT_EQ(all[1].id, "pt_10");
  EXPECT_EQ(all[0].split, "train");
  EXPECT_EQ(all[2].split, "val");
  EXPECT_EQ(all[3].split, "test");
  const auto val = openkbp::find_patients(dir / "provided-data" / "validation-pats");
  ASSERT_EQ(val.size(), 1u);
  EXPECT_EQ(val[0].split, "val");
  fs::create_directories(dir / "mine" / "pt_5");
  EXPECT_EQ(openkbp::find_patients(dir / "mine", "holdout")[0].split, "holdout");
  EXPECT_THROW(openkbp::find_patients(dir / "provided-data" / "train-pats" / "notes"), UsageError);
}

// The real sample: every patient's structures, dose, CT, mask and spacing survive the import, with
// the challenge's axis convention (index = (i0 * 128 + i1) * 128 + i2).
TEST(OpenKbpImport, RoundTripOnTheRealSample) {
  test::TempDir dir;
  const auto source = test::unpack_openkbp_sample(dir.path());
  if (!source) GTEST_SKIP() << "OpenKBP sample not found (../shared/data)";
  openkbp::CsvImportOptions o;
  o.source = *source;
  o.out = dir / "openkbp.h5";
  o.threads = 2;
  const auto report = openkbp::import_dataset(o);
  EXPECT_EQ(report.patients, 16);
  EXPECT_EQ(report.patients_per_split.at("train"), 12);
  EXPECT_EQ(report.patients_per_split.at("val"), 4);

  const DatasetReader reader(o.out);
  EXPECT_EQ(reader.info().channel_names, openkbp::channel_names());
  EXPECT_EQ(reader.info().target_units, "Gy");
  EXPECT_TRUE(openkbp::is_openkbp_dataset(reader.info()));
  EXPECT_EQ(reader.split("val"), (std::vector<std::string>{"pt_201", "pt_202", "pt_203", "pt_204"}));
  const auto& names = openkbp::structure_names();
  int checked_structures = 0;
  for (const auto& split : {"train", "val"}) {
    for (const auto& id : reader.split(split)) {
      const fs::path dir_of = *source / (std::string(split) == "train" ? "train-pats" : "validation-pats") / id;
      const CaseData c = reader.read_case(id);
      ASSERT_EQ(c.image.sizes(), (torch::IntArrayRef{11, 128, 128, 128})) << id;
      for (size_t s = 0; s < names.size(); ++s) {
        const fs::path file = dir_of / (names[s] + ".csv");
        const int64_t rows = fs::exists(file) ? static_cast<int64_t>(plain_csv(file).indices.size()) : 0;
        const torch::Tensor channel = c.image[static_cast<int64_t>(s) + 1];
        EXPECT_EQ(channel.sum().item<double>(), static_cast<double>(rows)) << id << " " << names[s];
        EXPECT_EQ((channel != 0).sum().item<int64_t>(), rows) << id << " " << names[s];
        checked_structures += rows > 0;
      }
      const PlainCsv dose = plain_csv(dir_of / "dose.csv");
      double csv_sum = 0;
      for (double v : dose.values) csv_sum += v;
      ASSERT_TRUE(c.target.defined()) << id;
      EXPECT_NEAR(c.target.to(torch::kDouble).sum().item<double>(), csv_sum, 1e-6 * csv_sum) << id;
      // Axis convention: the CSV's flat index addresses (i0, i1, i2) in C order.
      const int64_t idx = dose.indices[dose.indices.size() / 2];
      EXPECT_FLOAT_EQ(c.target[idx / 16384][(idx / 128) % 128][idx % 128].item<float>(),
                      static_cast<float>(dose.values[dose.indices.size() / 2]))
          << id;
      // CT is stored exactly.
      const PlainCsv ct = plain_csv(dir_of / "ct.csv");
      const torch::Tensor ct_flat = c.image[0].reshape({-1});
      double ct_sum = 0;
      for (double v : ct.values) ct_sum += v;
      EXPECT_EQ(ct_flat.to(torch::kDouble).sum().item<double>(), ct_sum) << id;
      EXPECT_EQ(ct_flat[ct.indices.front()].item<float>(), static_cast<float>(ct.values.front())) << id;
      const PlainCsv mask = plain_csv(dir_of / "possible_dose_mask.csv");
      ASSERT_TRUE(c.mask.defined());
      EXPECT_EQ(c.mask.sum().item<int64_t>(), static_cast<int64_t>(mask.indices.size())) << id;
      const auto vd = openkbp::read_voxel_dimensions(dir_of / "voxel_dimensions.csv");
      EXPECT_EQ(c.spacing, vd) << id;
    }
  }
  EXPECT_GT(checked_structures, 100);
}

// A bad file stops the import with file:line and leaves no output file.
TEST(OpenKbpImport, BadFileStopsTheImportWithFileAndLine) {
  test::TempDir dir;
  const auto source = test::unpack_openkbp_sample(dir / "sample");
  if (!source) GTEST_SKIP() << "OpenKBP sample not found (../shared/data)";
  const fs::path pt = *source / "validation-pats" / "pt_203";
  // Repeat the first data row of dose.csv at the end of the file.
  std::string text = test::read_text(pt / "dose.csv");
  const auto first = text.find('\n') + 1;
  const std::string row = text.substr(first, text.find('\n', first) + 1 - first);
  const int64_t lines = std::count(text.begin(), text.end(), '\n');
  test::write_text(pt / "dose.csv", text + row);
  openkbp::CsvImportOptions o;
  o.source = *source;
  o.out = dir / "out.h5";
  o.threads = 2;
  const auto msg = data_error([&] { openkbp::import_dataset(o); });
  EXPECT_NE(msg.find((pt / "dose.csv").string() + ":" + std::to_string(lines + 1) + ": index "), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("appears twice (first on line 2)"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(o.out));
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find("out.h5"), std::string::npos) << "left behind: " << e.path();
  }
  // A missing required file is named too.
  test::write_text(pt / "dose.csv", text);
  fs::remove(*source / "train-pats" / "pt_4" / "ct.csv");
  const auto missing = data_error([&] { openkbp::import_dataset(o); });
  EXPECT_NE(missing.find((*source / "train-pats" / "pt_4" / "ct.csv").string() + ": required file is missing"),
            std::string::npos)
      << missing;
}

}  // namespace
}  // namespace u3d
