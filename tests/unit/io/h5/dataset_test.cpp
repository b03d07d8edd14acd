#include <gtest/gtest.h>
#include <hdf5.h>

#include "fixtures.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

DatasetInfo seg_info() {
  DatasetInfo info = test::segmentation_info({"t1", "t2"}, {"background", "a", "b"});
  return info;
}

CaseData seg_case(const std::string& id, int64_t d = 6, int64_t h = 7, int64_t w = 8) {
  CaseData c;
  c.id = id;
  c.image = torch::arange(2 * d * h * w, torch::kFloat).reshape({2, d, h, w}) / 10.0;
  c.target = (torch::arange(d * h * w).reshape({d, h, w}) % 3).to(torch::kUInt8);
  c.mask = (torch::arange(d * h * w).reshape({d, h, w}) % 2).to(torch::kUInt8);
  c.spacing = {2.0, 0.5, 0.75};
  return c;
}

void write(const fs::path& path, const DatasetInfo& info, const std::vector<CaseData>& cases,
           const std::map<std::string, std::vector<std::string>>& splits) {
  DatasetWriter w(path, info);
  for (const auto& c : cases) w.write_case(c);
  for (const auto& [name, ids] : splits) w.set_split(name, ids);
  w.commit();
}

TEST(Dataset, RoundTripKeepsEveryField) {
  test::TempDir dir;
  const auto path = dir / "d.h5";
  write(path, seg_info(), {seg_case("c1"), seg_case("c2", 4, 4, 4)}, {{"train", {"c1"}}, {"val", {"c2"}}});
  DatasetReader r(path);
  EXPECT_EQ(r.info().task, Task::kSegmentation);
  EXPECT_EQ(r.info().channel_names, (std::vector<std::string>{"t1", "t2"}));
  EXPECT_EQ(r.info().num_classes, 3);
  EXPECT_EQ(r.info().class_names[2], "b");
  EXPECT_EQ(r.info().case_ids, (std::vector<std::string>{"c1", "c2"}));
  EXPECT_EQ(r.split("train"), (std::vector<std::string>{"c1"}));
  EXPECT_EQ(r.case_shape("c1"), (Shape3{6, 7, 8}));
  const CaseData orig = seg_case("c1");
  const CaseData back = r.read_case("c1");
  EXPECT_TRUE(torch::equal(back.image, orig.image));
  EXPECT_TRUE(torch::equal(back.target, orig.target));
  EXPECT_TRUE(torch::equal(back.mask, orig.mask));
  EXPECT_EQ(back.spacing, orig.spacing);
}

TEST(Dataset, Int16ImagesStayExactAndReadAsFloat) {
  test::TempDir dir;
  DatasetInfo info;
  info.channel_names = {"ct"};
  info.target_units = "Gy";
  CaseData c;
  c.id = "p1";
  c.image = (torch::arange(64, torch::kInt16).reshape({1, 4, 4, 4}) * 50 - 1000);
  c.target = torch::rand({4, 4, 4});
  write(dir / "d.h5", info, {c}, {{"train", {"p1"}}});
  const CaseData back = DatasetReader(dir / "d.h5").read_case("p1");
  EXPECT_EQ(back.image.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(back.image, c.image.to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(back.target, c.target));
  EXPECT_FALSE(back.mask.defined());
}

// A split is asked for by name (a config key, --split): a missing one is a usage error (exit 2).
TEST(Dataset, MissingSplitNamesTheAvailableOnes) {
  test::TempDir dir;
  write(dir / "d.h5", seg_info(), {seg_case("c1")}, {{"train", {"c1"}}});
  DatasetReader r(dir / "d.h5");
  try {
    r.split("val");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("split 'val' is missing; the file has: train"), std::string::npos) << e.what();
  }
}

TEST(Dataset, UncommittedWriterLeavesNothing) {
  test::TempDir dir;
  {
    DatasetWriter w(dir / "d.h5", seg_info());
    w.write_case(seg_case("c1"));
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Dataset, WriterRejectsBadInput) {
  test::TempDir dir;
  DatasetWriter w(dir / "d.h5", seg_info());
  CaseData bad = seg_case("c/1");
  EXPECT_THROW(w.write_case(bad), DataError);
  bad = seg_case("c1");
  bad.image = bad.image.slice(0, 0, 1);  // one channel, two declared
  EXPECT_THROW(w.write_case(bad), DataError);
  w.write_case(seg_case("c2"));
  EXPECT_THROW(w.write_case(seg_case("c2")), DataError);  // twice
  w.set_split("train", {"nope"});
  EXPECT_THROW(w.commit(), DataError);
}

TEST(Dataset, ReaderRejectsForeignAndBrokenFiles) {
  test::TempDir dir;
  test::write_text(dir / "text.h5", "not hdf5");
  EXPECT_THROW(DatasetReader(dir / "text.h5"), DataError);
  EXPECT_THROW(DatasetReader(dir / "missing.h5"), IoError);
  // A valid HDF5 file without the format attribute.
  const hid_t f = H5Fcreate((dir / "plain.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  try {
    DatasetReader r(dir / "plain.h5");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("not a trainer dataset"), std::string::npos) << e.what();
  }
  // Truncated file.
  write(dir / "d.h5", seg_info(), {seg_case("c1", 32, 32, 32)}, {{"train", {"c1"}}});
  const auto size = fs::file_size(dir / "d.h5");
  fs::resize_file(dir / "d.h5", size / 2);
  EXPECT_THROW(
      {
        DatasetReader r(dir / "d.h5");
        r.read_case("c1");
      },
      Error);
}

TEST(Dataset, ReadCaseChecksContent) {
  test::TempDir dir;
  CaseData nan_case = seg_case("c1");
  nan_case.image[0][1][2][3] = std::numeric_limits<float>::quiet_NaN();
  CaseData bad_labels = seg_case("c2");
  bad_labels.target[0][0][0] = 7;
  write(dir / "d.h5", seg_info(), {nan_case, bad_labels}, {{"train", {"c1", "c2"}}});
  DatasetReader r(dir / "d.h5");
  try {
    r.read_case("c1");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("case 'c1': 'image' holds 1 NaN or Inf voxels"), std::string::npos)
        << e.what();
  }
  try {
    r.read_case("c2");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("label values in [0, 7]; num_classes = 3"), std::string::npos) << e.what();
  }
}

// Files written by other tools may hold fixed-length strings (numpy 'S' arrays in h5py).
TEST(Dataset, FixedLengthStringsAreRead) {
  test::TempDir dir;
  const auto path = dir / "fixed.h5";
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hid_t str8 = H5Tcopy(H5T_C_S1);
  H5Tset_size(str8, 8);
  auto attr = [&](const char* name, const std::vector<std::string>& values, bool scalar) {
    const hsize_t n = values.size();
    const hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    std::vector<char> buf(8 * values.size(), '\0');
    for (size_t i = 0; i < values.size(); ++i) std::copy(values[i].begin(), values[i].end(), buf.begin() + 8 * i);
    const hid_t a = H5Acreate2(f, name, str8, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, str8, buf.data());
    H5Aclose(a);
    H5Sclose(space);
  };
  attr("format", {"u3d-dataset"}, true);  // 11 chars into 8: truncated -> must be rejected
  const hid_t s1 = H5Screate(H5S_SCALAR);
  const int64_t one = 1;
  const hid_t v = H5Acreate2(f, "format_version", H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(v, H5T_NATIVE_INT64, &one);
  H5Aclose(v);
  H5Sclose(s1);
  H5Fclose(f);
  EXPECT_THROW(DatasetReader r(path), DataError);

  // A proper fixed-length file: 16-byte strings.
  const auto good = dir / "fixed16.h5";
  DatasetInfo info = seg_info();
  write(good, info, {seg_case("c1")}, {});
  const hid_t g = H5Fopen(good.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t str16 = H5Tcopy(H5T_C_S1);
  H5Tset_size(str16, 16);
  const hsize_t two = 2;
  const hid_t space = H5Screate_simple(1, &two, nullptr);
  H5Adelete(g, "channel_names");
  const hid_t a = H5Acreate2(g, "channel_names", str16, space, H5P_DEFAULT, H5P_DEFAULT);
  char names[32] = "t1_fixed\0\0\0\0\0\0\0\0t2";
  H5Awrite(a, str16, names);
  H5Aclose(a);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hsize_t n1 = 1;
  const hid_t sp1 = H5Screate_simple(1, &n1, nullptr);
  const hid_t d = H5Dcreate2(g, "splits/train", str16, sp1, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  char id[16] = "c1";
  H5Dwrite(d, str16, H5S_ALL, H5S_ALL, H5P_DEFAULT, id);
  H5Dclose(d);
  H5Sclose(sp1);
  H5Pclose(lcpl);
  H5Sclose(space);
  H5Tclose(str16);
  H5Tclose(str8);
  H5Fclose(g);
  DatasetReader r(good);
  EXPECT_EQ(r.info().channel_names, (std::vector<std::string>{"t1_fixed", "t2"}));
  EXPECT_EQ(r.split("train"), (std::vector<std::string>{"c1"}));
}

}  // namespace
}  // namespace u3d
