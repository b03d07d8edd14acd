// A hostile pass over `trainer import images` (issue 54) on slices written by Pillow and zlib
// (tests/python/write_hostile_slices.py): masks are read as class numbers whatever their PNG kind,
// broken and forged files are refused with one line naming them and nothing written, odd but valid
// folders (1x1 slices, one patient of everything) import as a careful reader would.
#include <gtest/gtest.h>

#include <cstdlib>

#include "python_input.h"
#include "test_support.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

class ImagesHostile : public test::PythonInputTest {
 protected:
  ImagesHostile() : PythonInputTest("write_hostile_slices.py", "") {}
  test::CommandResult import(const std::string& folder, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"import", "images", "--images", folder, "--out", "x.h5"};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_trainer(args, dir.path());
  }
};

TEST_F(ImagesHostile, BrokenOrForgedFilesAreRefusedInOneLineNamingThem) {
  struct Row {
    std::string folder, needle;
  };
  const std::vector<Row> rows{
      {"sizes", "sizes/p_1_mask.png is 16x32 but its image sizes/p_1.png is 32x32"},
      {"rgbmask", "rgbmask/p_1_mask.png: a colour mask, pixel (row 4, column 4) is RGB (255, 0, 0)"},
      {"mask16", "mask16/p_1_mask.png: holds the label value 300; at most 255"},
      {"truncated", "truncated/p_1_mask.png: cannot read the image (libpng: "},
      // Before: a 1.3 GB buffer allocated (PNG_IMAGE_SIZE wraps at 32 bits), then libpng: "image too large".
      {"huge", "huge/p_1_mask.png: its header declares 100000 x 100000 pixels (10.0 GB of image data), more than"},
  };
  for (const auto& row : rows) {
    const auto r = import(row.folder);
    EXPECT_EQ(r.exit_code, 1) << row.folder << "\n" << r.output;
    const size_t line = r.output.find("[error]");
    ASSERT_NE(line, std::string::npos) << row.folder << "\n" << r.output;
    EXPECT_EQ(r.output.find("[error]", line + 1), std::string::npos) << "one error line: " << r.output;
    EXPECT_NE(r.output.find(row.needle, line), std::string::npos) << row.folder << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "x.h5")) << row.folder;
  }
}

// Grey, RGB and palette images; a palette mask of red and green (read as indices 1, 2, not as the
// grey 126, 219 as libpng converts them), an RGB mask of grey pixels, a 16-bit mask and a grey mask whose
// labels are half transparent (before: composited on black, every label became 0): labels 0..2 in every case.
TEST_F(ImagesHostile, MasksOfEveryPngKindAreReadAsClassNumbers) {
  const auto r = import("kinds");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mask values {0, 1, 2} are the labels (classes 0..2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 colour image(s) converted to grey"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 palette mask(s) read as their palette indices"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.info().num_classes, 3);
  const torch::Tensor grey = data.read_case("grey").target, rgb = data.read_case("rgb").target;
  const torch::Tensor pal = data.read_case("pal").target;
  EXPECT_TRUE(torch::equal(grey, rgb)) << "the palette mask and the grey RGB mask hold the same labels";
  EXPECT_TRUE(torch::equal(grey, pal)) << "the palette mask and the 16-bit mask hold the same labels";
  EXPECT_TRUE(torch::equal(grey, data.read_case("alpha").target)) << "half-transparent labels keep their numbers";
  EXPECT_EQ(grey[0][5][5].item<int64_t>(), 1);
  EXPECT_EQ(grey[0][20][10].item<int64_t>(), 2);
  EXPECT_EQ((grey == 1).sum().item<int64_t>(), 8 * 16);
}

// 1x1 slices import as (3, 1, 1) cases; a --group that makes one patient of every slice imports one
// case and says the asked-for val and test splits are empty, instead of dropping them without a word.
TEST_F(ImagesHostile, TinySlicesAndOnePatientOfEverything) {
  auto r = import("tiny");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    DatasetReader data(dir / "x.h5");
    EXPECT_EQ(data.case_shape("p1"), (Shape3{3, 1, 1}));
    EXPECT_EQ(data.read_case("p2").image[0][2][0][0].item<int64_t>(), 32);
  }
  fs::remove(dir / "x.h5");
  r = import("tiny", {"--group", "^(p)", "--test-fraction", "0.3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--val-fraction 0.2 leaves split 'val' empty: the 6 slices make 1 case(s)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--test-fraction 0.3 leaves split 'test' empty"), std::string::npos) << r.output;
  DatasetReader data(dir / "x.h5");
  EXPECT_EQ(data.case_shape("p"), (Shape3{6, 1, 1}));
}

}  // namespace
}  // namespace u3d
