// 3D TIFF volumes (io/tiff/tiff.h) read and written through libtiff, the TIFF importer (import_tiff), and
// the ignore label of both segmentation importers (TIFF --ignore-label, nnU-Net's "ignore" entry).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <tiffio.h>

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <fstream>
#include <functional>

#include "fixtures.h"
#include "nifti_support.h"
#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/import.h"
#include "u3d/io/synth.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

using test::error_of;

// scale * i + offset at voxel i in C order; uint8: modulo 256.
torch::Tensor ramp(const Shape3& s, torch::ScalarType t, double scale = 1.0, double offset = 0.0) {
  torch::Tensor v = torch::arange(s[0] * s[1] * s[2], torch::kDouble).reshape({s[0], s[1], s[2]}) * scale + offset;
  if (t == torch::kUInt8) v = v.remainder(256);
  return v.to(t);
}

// A TIFF file written with libtiff itself (not write_tiff_volume), big-endian (the other byte order
// than this machine's), one page per (H, W) tensor: uint8 tensors as uint8 samples, int32 tensors as
// uint16 samples; in 16 x 16 tiles or strips of 3 rows.
void write_test_tiff(const fs::path& path, const std::vector<torch::Tensor>& pages, bool tiled) {
  TIFF* t = TIFFOpen(path.c_str(), "wb");  // b: big-endian
  ASSERT_NE(t, nullptr) << path;
  for (const auto& p : pages) {
    const bool u16 = p.scalar_type() == torch::kInt32;
    const uint32_t h = static_cast<uint32_t>(p.size(0)), w = static_cast<uint32_t>(p.size(1));
    const size_t bpp = u16 ? 2 : 1;
    std::vector<uint8_t> pixels(h * w * bpp);
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const auto v = p[y][x].item<int64_t>();
        if (u16) {
          const auto s = static_cast<uint16_t>(v);
          std::memcpy(&pixels[(y * w + x) * 2], &s, 2);
        } else {
          pixels[y * w + x] = static_cast<uint8_t>(v);
        }
      }
    }
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, u16 ? 16 : 8);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
    if (tiled) {
      TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
      TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
      std::vector<uint8_t> tile(16 * 16 * bpp);
      for (uint32_t y0 = 0; y0 < h; y0 += 16) {
        for (uint32_t x0 = 0; x0 < w; x0 += 16) {
          std::fill(tile.begin(), tile.end(), 0);
          for (uint32_t y = y0; y < std::min(h, y0 + 16); ++y) {
            for (uint32_t x = x0; x < std::min(w, x0 + 16); ++x) {
              std::memcpy(&tile[((y - y0) * 16 + (x - x0)) * bpp], &pixels[(y * w + x) * bpp], bpp);
            }
          }
          ASSERT_GE(TIFFWriteTile(t, tile.data(), x0, y0, 0, 0), 0);
        }
      }
    } else {
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 3);
      for (uint32_t y = 0; y < h; ++y) {
        std::vector<uint8_t> row(pixels.begin() + y * w * bpp, pixels.begin() + (y + 1) * w * bpp);
        ASSERT_EQ(TIFFWriteScanline(t, row.data(), y, 0), 1);
      }
    }
    ASSERT_TRUE(TIFFWriteDirectory(t));
  }
  TIFFClose(t);
}

TEST(Tiff, WrittenVolumesReadBackExactlyInTheirType) {
  test::TempDir dir;
  const std::vector<torch::Tensor> volumes = {
      ramp({5, 7, 9}, torch::kUInt8),                  // every byte value
      ramp({3, 300, 301}, torch::kUInt8),              // several strips per page
      ramp({4, 6, 5}, torch::kFloat, -0.37, 12.5),     // negative and fractional
      ramp({4, 6, 5}, torch::kInt16, 97.0, -20000.0),  // signed 16 bits
      ramp({2, 8, 8}, torch::kInt32, 511.0, 300.0)};   // uint16 in the file, up to 65 197
  for (size_t i = 0; i < volumes.size(); ++i) {
    const fs::path p = dir / fmt::format("v{}.tif", i);
    write_tiff_volume(p, volumes[i]);
    const torch::Tensor back = read_tiff_volume(p);
    EXPECT_EQ(back.scalar_type(), volumes[i].scalar_type()) << p;
    EXPECT_TRUE(torch::equal(back, volumes[i])) << p;
  }
  EXPECT_GT(read_tiff_volume(dir / "v4.tif").max().item<int64_t>(), 32767);
  // Nothing but the volumes is left in the folder (the staged files were renamed).
  int64_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.path().filename().string()[0] == '.' ? 100 : 1;
  EXPECT_EQ(files, static_cast<int64_t>(volumes.size()));
}

TEST(Tiff, ReadsUint16AsInt32FromStripsAndTilesInEitherByteOrder) {
  test::TempDir dir;
  std::vector<torch::Tensor> pages;
  for (int k = 0; k < 3; ++k) pages.push_back(ramp({1, 20, 37}, torch::kInt32, 83.0, 1000.0 * k)[0]);
  for (const bool tiled : {false, true}) {
    const fs::path p = dir / (tiled ? "tiled.tif" : "strips.tif");
    write_test_tiff(p, pages, tiled);
    const torch::Tensor v = read_tiff_volume(p);
    ASSERT_EQ(v.sizes(), (std::vector<int64_t>{3, 20, 37})) << p;
    EXPECT_EQ(v.scalar_type(), torch::kInt32);
    EXPECT_TRUE(torch::equal(v, torch::stack(pages))) << p;
    EXPECT_EQ(v.max().item<int64_t>(), 2000 + 83 * (20 * 37 - 1));  // above 32767: read unsigned
  }
}

TEST(Tiff, RefusesPagesOfAnotherSizeNamingFileAndPage) {
  test::TempDir dir;
  const fs::path p = dir / "ragged.tif";
  write_test_tiff(
      p,
      {torch::zeros({8, 8}, torch::kUInt8), torch::zeros({8, 8}, torch::kUInt8), torch::zeros({8, 9}, torch::kUInt8)},
      /*tiled=*/false);
  const std::string msg = error_of<DataError>([&] { read_tiff_volume(p); });
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("page 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9x8 uint8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 8x8 uint8"), std::string::npos) << msg;
}

TEST(Tiff, RefusesOtherFilesWithOneLineAndLibtiffSilent) {
  test::TempDir dir;
  const fs::path text = dir / "notes.tif";
  std::ofstream(text) << "this is not a TIFF file\n";
  const fs::path truncated = dir / "truncated.tif";
  write_tiff_volume(truncated, ramp({4, 64, 64}, torch::kFloat));
  fs::resize_file(truncated, fs::file_size(truncated) / 2);

  testing::internal::CaptureStderr();
  const std::string not_tiff = error_of<DataError>([&] { read_tiff_volume(text); });
  const std::string cut = error_of<Error>([&] { read_tiff_volume(truncated); });
  const std::string missing = error_of<IoError>([&] { read_tiff_volume(dir / "absent.tif"); });
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "") << "libtiff wrote to stderr";

  EXPECT_NE(not_tiff.find(text.string()), std::string::npos) << not_tiff;
  EXPECT_NE(not_tiff.find("libtiff: "), std::string::npos) << not_tiff;  // libtiff's reason, as text
  EXPECT_NE(cut.find(truncated.string()), std::string::npos) << cut;
  EXPECT_NE(missing.find("absent.tif"), std::string::npos) << missing;
  for (const auto& m : {not_tiff, cut, missing}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(Tiff, WriterRefusesWhatTiffCannotHoldAndLeavesNothing) {
  test::TempDir dir;
  const fs::path p = dir / "v.tif";
  EXPECT_NE(error_of<DataError>([&] {
              write_tiff_volume(p, torch::full({2, 2, 2}, 70000, torch::kInt32));
            }),
            "no error");
  EXPECT_NE(error_of<DataError>([&] { write_tiff_volume(p, torch::zeros({2, 2, 2}, torch::kDouble)); }), "no error");
  EXPECT_NE(error_of<DataError>([&] { write_tiff_volume(p, torch::zeros({2, 2}, torch::kUInt8)); }), "no error");
  EXPECT_TRUE(fs::is_empty(dir.path()));
}
// A classic little-endian TIFF header declaring one `width` x `height` uint16 page, with no pixels.
void write_forged_tiff(const fs::path& path, uint32_t width, uint32_t height) {
  std::string b("II*\0\x08\0\0\0", 8);  // the first IFD right after the header
  const auto put16 = [&b](uint16_t v) { b.append(reinterpret_cast<const char*>(&v), 2); };
  const auto put32 = [&b](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  const std::vector<std::array<uint32_t, 3>> entries = {
      // tag, type (3 short, 4 long), value
      {256, 4, width}, {257, 4, height}, {258, 3, 16},     {259, 3, 1}, {262, 3, 1},
      {273, 4, 8},     {277, 3, 1},      {278, 4, height}, {279, 4, 1}, {339, 3, 1}};
  put16(static_cast<uint16_t>(entries.size()));
  for (const auto& [tag, type, value] : entries) {
    put16(static_cast<uint16_t>(tag));
    put16(static_cast<uint16_t>(type));
    put32(1);
    if (type == 3) {
      put16(static_cast<uint16_t>(value));
      put16(0);
    } else {
      put32(value);
    }
  }
  put32(0);  // no next IFD
  std::ofstream(path, std::ios::binary) << b;
}

// A header declaring 500 GB is refused from the header, before any allocation (it used to reach
// LibTorch's allocator, whose "enforce fail" line was the message); a FIFO is not read at all.
TEST(Tiff, DeclaredSizesAndFilesAreCheckedBeforeReading) {
  test::TempDir dir;
  write_forged_tiff(dir / "huge.tif", 500000, 500000);
  const std::string msg = error_of<DataError>([&] { read_tiff_volume(dir / "huge.tif"); });
  EXPECT_NE(msg.find((dir / "huge.tif").string() + ": declares shape [1, 500000, 500000] (1.0 TB as uint16)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("memory available"), std::string::npos) << msg;
  ASSERT_EQ(::mkfifo((dir / "pipe.tif").c_str(), 0644), 0);
  EXPECT_EQ(error_of<IoError>([&] { read_tiff_volume(dir / "pipe.tif"); }),
            (dir / "pipe.tif").string() + ": is a FIFO (named pipe); expected a TIFF file (a regular file)");
}

class ImportTiff : public ::testing::Test {
 protected:
  test::TempDir dir;
  const Shape3 shape{6, 10, 12};
  fs::path images() const { return dir / "images"; }
  fs::path labels() const { return dir / "labels"; }
  // Case `i`: a uint8 image and labels 0 background, 1 surface, 2 unlabeled (a slab of slices).
  void add_case(const std::string& id, int i, const std::string& ending = ".tif") {
    fs::create_directories(images());
    fs::create_directories(labels());
    write_tiff_volume(images() / (id + ending), ramp(shape, torch::kUInt8, 1.0, i));
    torch::Tensor l = torch::zeros({shape[0], shape[1], shape[2]}, torch::kUInt8);
    l.select(1, 3 + i).fill_(1);
    l.narrow(0, 0, 2).fill_(2);
    write_tiff_volume(labels() / (id + ending), l);
  }
  TiffImportOptions options(bool with_labels = true) const {
    TiffImportOptions o;
    o.images = images();
    if (with_labels) o.labels = labels();
    o.threads = 2;
    o.val_fraction = 0.34;
    return o;
  }
  // The import's error, and that no output was left behind.
  template <class E = DataError>
  std::string failure(const TiffImportOptions& o) {
    const fs::path out = dir / "bad.h5";
    std::string msg = error_of<E>([&] { import_tiff(o, out); });
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(dir.path())) {
      EXPECT_EQ(e.path().filename().string().find(".bad.h5"), std::string::npos) << "partial file left";
    }
    return msg;
  }
};

TEST_F(ImportTiff, PairsByNameAndRecordsTheIgnoreLabel) {
  add_case("scroll_b", 1);
  add_case("scroll_a", 0, ".tiff");
  add_case("scroll_c", 2);
  TiffImportOptions o = options();
  o.ignore_label = 2;
  o.spacing = {2.0, 1.0, 0.5};
  const ImportSummary s = import_tiff(o, dir / "d.h5");
  EXPECT_EQ(s.train, 2);
  EXPECT_EQ(s.val, 1);
  DatasetReader r(dir / "d.h5");
  const DatasetInfo& info = r.info();
  EXPECT_EQ(info.task, Task::kSegmentation);
  EXPECT_EQ(info.ignore_label, 2);
  EXPECT_EQ(info.num_classes, 2);
  EXPECT_EQ(info.class_names, (std::vector<std::string>{"background", "class_1"}));
  EXPECT_EQ(info.channel_names, (std::vector<std::string>{"image"}));
  EXPECT_EQ(info.channel_normalization, (std::vector<std::string>{"zscore"}));
  EXPECT_EQ(info.case_ids, (std::vector<std::string>{"scroll_a", "scroll_b", "scroll_c"}));
  const CaseData c = r.read_case("scroll_b");
  EXPECT_TRUE(torch::equal(c.image[0], ramp(shape, torch::kUInt8, 1.0, 1).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(c.target, read_tiff_volume(labels() / "scroll_b.tif")));
  EXPECT_TRUE(c.target.eq(2).any().item<bool>());
  EXPECT_EQ(c.spacing, (std::array<double, 3>{2.0, 1.0, 0.5}));
  // uint8 images stay uint8 in the file.
  const hid_t f = H5Fopen((dir / "d.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t d = H5Dopen2(f, "cases/scroll_b/image", H5P_DEFAULT);
  const hid_t t = H5Dget_type(d);
  EXPECT_EQ(H5Tget_size(t), 1u);
  EXPECT_EQ(H5Tget_sign(t), H5T_SGN_NONE);
  H5Tclose(t);
  H5Dclose(d);
  H5Fclose(f);
}

TEST_F(ImportTiff, WithoutIgnoreLabelEveryValueIsAClass) {
  add_case("a", 0);
  add_case("b", 1);
  import_tiff(options(), dir / "d.h5");
  DatasetReader r(dir / "d.h5");
  EXPECT_EQ(r.info().ignore_label, -1);
  EXPECT_EQ(r.info().num_classes, 3);
}

TEST_F(ImportTiff, NamesEveryUnmatchedFileInOneLine) {
  add_case("a", 0);
  add_case("b", 1);
  add_case("c", 2);
  fs::remove(labels() / "b.tif");
  fs::rename(images() / "c.tif", images() / "c2.tif");
  const std::string msg = failure(options());
  EXPECT_NE(msg.find((images() / "b.tif").string() + " (no label)"), std::string::npos) << msg;
  EXPECT_NE(msg.find((images() / "c2.tif").string() + " (no label)"), std::string::npos) << msg;
  EXPECT_NE(msg.find((labels() / "c.tif").string() + " (no image)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find((images() / "a.tif").string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Defect 4: a.tif and a.tiff name one case; the message names both files, the same every run (it
// used to print garbage bytes: std::minmax over two temporaries kept dangling references).
TEST_F(ImportTiff, TwoFilesOfOneStemAreNamedBoth) {
  add_case("a", 0);
  add_case("b", 1);
  write_tiff_volume(images() / "a.tiff", ramp(shape, torch::kUInt8));
  const std::string expected = fmt::format("{} and {}: two volumes of case 'a'; keep one",
                                           (images() / "a.tif").string(), (images() / "a.tiff").string());
  for (int run = 0; run < 3; ++run) EXPECT_EQ(failure(options()), expected);
}

TEST_F(ImportTiff, EveryBadInputNamesTheFileOrCase) {
  add_case("a", 0);
  add_case("b", 1);
  // A label volume of another shape: the case and both files.
  write_tiff_volume(labels() / "b.tif", torch::zeros({6, 10, 11}, torch::kUInt8));
  std::string msg = failure(options());
  EXPECT_NE(msg.find("case 'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find((labels() / "b.tif").string()), std::string::npos) << msg;
  // A label above the ignore label.
  add_case("b", 1);
  torch::Tensor l = read_tiff_volume(labels() / "a.tif");
  l[0][0][0] = 3;
  write_tiff_volume(labels() / "a.tif", l);
  TiffImportOptions o = options();
  o.ignore_label = 2;
  msg = failure(o);
  EXPECT_NE(msg.find((labels() / "a.tif").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("above the ignore label 2"), std::string::npos) << msg;
  // A file that is no TIFF.
  std::ofstream(images() / "a.tif") << "not an image";
  msg = failure(options());
  EXPECT_NE(msg.find((images() / "a.tif").string()), std::string::npos) << msg;
  // Options.
  o.ignore_label = 1;
  EXPECT_NE(failure<UsageError>(o).find("--ignore-label 1"), std::string::npos);
  o = options();
  o.images = dir / "nowhere";
  EXPECT_NE(failure(o).find("nowhere: folder not found"), std::string::npos);
}

TEST_F(ImportTiff, ImagesWithoutLabelsMakeADatasetToPredict) {
  add_case("a", 0);
  add_case("b", 1);
  write_tiff_volume(images() / "wide.tif", ramp(shape, torch::kInt32, 60.0));  // uint16 above int16
  const ImportSummary s = import_tiff(options(/*with_labels=*/false), dir / "p.h5");
  EXPECT_EQ(s.test, 3);
  EXPECT_EQ(s.train + s.val, 0);
  DatasetReader r(dir / "p.h5");
  EXPECT_EQ(r.split("test"), (std::vector<std::string>{"a", "b", "wide"}));
  EXPECT_FALSE(r.has_split("train"));
  const CaseData c = r.read_case("wide");
  EXPECT_FALSE(c.target.defined());
  EXPECT_TRUE(torch::equal(c.image[0], ramp(shape, torch::kFloat, 60.0)));
}

TEST(ImportTiffPhantom, SynthFoldersImportAsTheyWereMade) {
  test::TempDir dir;
  PhantomOptions p = test::surface_phantom(3, 16);
  write_phantom_tiff(p, dir / "phantom");
  TiffImportOptions o;
  o.images = dir / "phantom" / "images";
  o.labels = dir / "phantom" / "labels";
  o.ignore_label = 2;
  import_tiff(o, dir / "d.h5");
  DatasetReader r(dir / "d.h5");
  EXPECT_EQ(r.info().case_ids.size(), 3u);
  EXPECT_EQ(r.info().num_classes, 2);
  for (int64_t i = 0; i < 3; ++i) {
    const CaseData made = make_phantom_case(Task::kSegmentation, p.size, p.seed, i, p.kind);
    const CaseData read = r.read_case(made.id);
    EXPECT_TRUE(torch::equal(read.image, made.image)) << made.id;
    EXPECT_TRUE(torch::equal(read.target, made.target)) << made.id;
  }
  p.task = Task::kDose;
  EXPECT_NE(error_of<UsageError>([&] { write_phantom_tiff(p, dir / "dose"); }), "no error");
}

TEST(ImportNnunetIgnore, TheEntryNamedIgnoreIsTheIgnoreLabelNotAClass) {
  test::TempDir dir;
  const fs::path raw = test::make_nnunet_raw(dir.path(), 3, {12, 14, 16});  // labels 0, 1, 2
  const auto json = raw / "dataset.json";
  auto set_labels = [&](const std::string& labels) {
    std::ofstream(json) << R"({"channel_names": {"0": "CT", "1": "T2"}, "labels": )" << labels
                        << R"(, "numTraining": 3, "file_ending": ".nii.gz"})";
  };
  set_labels(R"({"background": 0, "liver": 1, "ignore": 2})");
  NiftiImportOptions o;
  o.threads = 2;
  import_nnunet(raw, dir / "d.h5", o);
  DatasetReader r(dir / "d.h5");
  EXPECT_EQ(r.info().ignore_label, 2);
  EXPECT_EQ(r.info().num_classes, 2);
  EXPECT_EQ(r.info().class_names, (std::vector<std::string>{"background", "liver"}));
  bool has_ignored = false;
  for (const auto& id : r.info().case_ids) has_ignored |= r.read_case(id).target.eq(2).any().item<bool>();
  EXPECT_TRUE(has_ignored);
  // nnU-Net's rule: the ignore label is the highest.
  set_labels(R"({"background": 0, "ignore": 1, "liver": 2})");
  const std::string msg = error_of<DataError>([&] { import_nnunet(raw, dir / "e.h5", o); });
  EXPECT_NE(msg.find("must be the highest"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir / "e.h5"));
}

}  // namespace
}  // namespace u3d
