// io/images/image2d.h and the naming rules of io/images/image2d_import.h: the PNG writer and reader round trip,
// the case a slice belongs to, natural order.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/images/image2d_import.h"

namespace u3d {
namespace {

TEST(Image2d, PngRoundTripsEightBitGrey) {
  test::TempDir dir;
  const torch::Tensor img = torch::randint(0, 256, {7, 11}, torch::kUInt8);
  write_png_gray8(dir / "a.png", img);
  const Image2d back = read_image2d(dir / "a.png");
  EXPECT_TRUE(torch::equal(back.pixels, img));
  EXPECT_FALSE(back.color);
  EXPECT_EQ(back.bits, 8);
}

TEST(Image2d, RefusesWhatIsNotAnImage) {
  test::TempDir dir;
  test::write_text(dir / "x.png", "not a png");
  try {
    read_image2d(dir / "x.png");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("x.png: not a readable PNG file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_png_gray8(dir / "y.png", torch::zeros({2, 2, 2}, torch::kUInt8)), DataError);
  EXPECT_FALSE(is_image2d_path("a.jpg"));
  EXPECT_TRUE(is_image2d_path("a.TIF"));
}

TEST(Image2d, SliceCaseIsTheNameUpToItsLastDigitRun) {
  EXPECT_EQ(slice_case("TCGA_CS_4941_19960909_12", ""), "TCGA_CS_4941_19960909");
  EXPECT_EQ(slice_case("patient-7-003", ""), "patient-7");
  EXPECT_EQ(slice_case("brain", ""), "brain");  // no digit run: a case of its own
  EXPECT_EQ(slice_case("case12", ""), "case12");
  EXPECT_EQ(slice_case("p01_s3", "^(p[0-9]+)_"), "p01");
  EXPECT_EQ(slice_case("q01_s3", "^(p[0-9]+)_"), std::nullopt);
}

TEST(Image2d, NaturalOrderComparesDigitRunsAsNumbers) {
  EXPECT_TRUE(natural_less("a_2", "a_10"));
  EXPECT_FALSE(natural_less("a_10", "a_2"));
  EXPECT_TRUE(natural_less("a_1", "a_1_x"));
  EXPECT_TRUE(natural_less("a_9", "b_1"));
  EXPECT_TRUE(natural_less("a_02", "a_3"));
  EXPECT_FALSE(natural_less("a_3", "a_3"));
}

}  // namespace
}  // namespace u3d
