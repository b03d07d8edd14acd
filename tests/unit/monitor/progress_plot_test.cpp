// progress.png: metrics.csv reading, and the drawing checked on the decoded pixels (libpng): each
// series' colour inside its own panel and nowhere else, points in the columns x_pixel() gives,
// gaps left empty. Needs no torch: builds with the test's own temporary folder.
#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/monitor/progress_plot.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

using test::TempDir;
using test::write_text;

// metrics.csv's columns: the common ones around the task's validation `scores`.
std::vector<std::string> columns(const std::vector<std::string>& scores) {
  std::vector<std::string> c = {"epoch", "step", "lr", "train_loss", "val_loss"};
  c.insert(c.end(), scores.begin(), scores.end());
  for (const char* tail :
       {"best", "epoch_seconds", "data_seconds", "data_share", "gpu_busy", "samples_per_second", "skipped_steps"})
    c.push_back(tail);
  return c;
}
const std::vector<std::string> kSegColumns = columns({"val_dice", "val_pseudo_dice", "val_pseudo_dice_ema"});
const std::vector<std::string> kDoseColumns = columns({"val_mae", "val_dose_score", "val_dvh_score"});

using FieldFn = std::function<std::string(const std::string& column, int epoch)>;

// Distinct, smooth curves for every column of both tasks; the best epoch is 30.
std::string default_field(const std::string& c, int e) {
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (c == "epoch") return std::to_string(e);
  if (c == "step") return std::to_string(10 * e);
  if (c == "lr") return num(0.01 * std::pow(1.0 - e / 1001.0, 0.9));
  if (c == "train_loss") return num(1.0 - 0.015 * e);
  if (c == "val_loss") return num(1.3 - 0.01 * e);
  if (c == "val_dice" || c == "val_mae") return num(0.3 + 0.01 * e);
  if (c == "val_pseudo_dice" || c == "val_dose_score") return num(0.2 + 0.015 * e);
  if (c == "val_pseudo_dice_ema" || c == "val_dvh_score") return num(0.9 - 0.01 * e);
  if (c == "best") return e == 30 ? "1" : "0";
  if (c == "epoch_seconds") return num(60 + 0.5 * e);
  if (c == "data_share") return num(0.08 / (1 + 0.02 * e));
  if (c == "gpu_busy") return num(0.5 + 0.01 * e);
  return "1";
}

// CSV text: `columns`, then one row per epoch in `epochs`.
std::string make_csv(const std::vector<std::string>& columns, const std::vector<int>& epochs,
                     const FieldFn& field = default_field) {
  std::string text;
  for (size_t i = 0; i < columns.size(); ++i) text += (i ? "," : "") + columns[i];
  text += "\n";
  for (int e : epochs) {
    for (size_t i = 0; i < columns.size(); ++i) text += (i ? "," : "") + field(columns[i], e);
    text += "\n";
  }
  return text;
}

std::vector<int> range(int first, int last) {
  std::vector<int> v;
  for (int e = first; e <= last; ++e) v.push_back(e);
  return v;
}

MetricsTable table_of(const std::string& csv) {
  TempDir dir;
  write_text(dir / "metrics.csv", csv);
  return read_metrics_csv(dir / "metrics.csv");
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

// `png` decoded to RGB; `stored_format`, when given, receives the file's own (PNG_FORMAT_*).
Image decode(const std::string& png, png_uint_32* stored_format = nullptr) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png.data(), png.size())) throw std::runtime_error(image.message);
  if (stored_format) *stored_format = image.format;
  image.format = PNG_FORMAT_RGB;
  Image out{static_cast<int>(image.width), static_cast<int>(image.height), {}};
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) throw std::runtime_error(image.message);
  return out;
}

// Within `tolerance` per channel: the fully covered pixels of a line or dot, not the blends at
// its edges (a lighter edge of one colour can come within 20 of another).
bool near(const uint8_t* p, Rgb c, int tolerance = 6) {
  return std::abs(p[0] - c.r) <= tolerance && std::abs(p[1] - c.g) <= tolerance && std::abs(p[2] - c.b) <= tolerance;
}

// Pixels of colour `c` in columns [x0, x1] and rows [y0, y1] (clamped to the image).
int count(const Image& im, Rgb c, double x0, double x1, double y0, double y1) {
  int n = 0;
  for (int y = std::max(0, static_cast<int>(y0)); y <= std::min(im.height - 1, static_cast<int>(y1)); ++y) {
    for (int x = std::max(0, static_cast<int>(x0)); x <= std::min(im.width - 1, static_cast<int>(x1)); ++x) {
      n += near(im.at(x, y), c);
    }
  }
  return n;
}
// Inside the plot area, the frame left out.
int count_in(const Image& im, Rgb c, const PlotRect& r) {
  return count(im, c, r.x + 3, r.right() - 3, r.y + 3, r.bottom() - 3);
}
int count_in_columns(const Image& im, Rgb c, const PlotRect& r, double x0, double x1) {
  return count(im, c, x0, x1, r.y + 3, r.bottom() - 3);
}
// The first and last column of `r` holding colour `c`; -1, -1 when none does.
std::pair<int, int> column_span(const Image& im, Rgb c, const PlotRect& r) {
  int lo = -1, hi = -1;
  for (int x = static_cast<int>(r.x) + 3; x <= static_cast<int>(r.right()) - 3; ++x) {
    if (count_in_columns(im, c, r, x, x) == 0) continue;
    if (lo < 0) lo = x;
    hi = x;
  }
  return {lo, hi};
}
// Grey text pixels around the middle of `r` (where a panel's note is written).
int note_pixels(const Image& im, const PlotRect& r) {
  int n = 0;
  const double cx = r.x + r.width / 2, cy = r.y + r.height / 2;
  for (int y = static_cast<int>(cy - 20); y <= static_cast<int>(cy + 20); ++y) {
    for (int x = static_cast<int>(cx - 200); x <= static_cast<int>(cx + 200); ++x) {
      const uint8_t* p = im.at(x, y);
      n += p[0] < 170 && p[0] == p[1] && p[1] == p[2];
    }
  }
  return n;
}

const std::vector<std::string> kSegSeries = {
    "train_loss", "val_loss",      "val_dice",   "val_pseudo_dice", "val_pseudo_dice_ema",
    "lr",         "epoch_seconds", "data_share", "gpu_busy"};
const std::vector<std::string> kDoseSeries = {"train_loss",     "val_loss",      "val_mae",
                                              "val_dose_score", "val_dvh_score", "lr",
                                              "epoch_seconds",  "data_share",    "gpu_busy"};

const PlotRect& panel_of(const PlotLayout& l, const std::string& column) {
  if (column == "lr") return l.lr;
  if (column == "epoch_seconds" || column == "data_share" || column == "gpu_busy") return l.time;
  return l.loss;
}

void expect_series_in_own_panel(const Image& im, const PlotLayout& l, const std::vector<std::string>& series) {
  for (const auto& name : series) {
    const Rgb c = series_color(name);
    for (const PlotRect* r : {&l.loss, &l.time, &l.lr}) {
      if (r == &panel_of(l, name)) {
        EXPECT_GT(count_in(im, c, *r), 20) << name << " missing from its panel";
      } else {
        EXPECT_EQ(count_in(im, c, *r), 0) << name << " drawn in another panel";
      }
    }
  }
}

TEST(ProgressPlot, ReadsColumnsMissingAndNonFiniteValues) {
  const auto t = table_of("epoch,lr,train_loss,val_loss\n1,0.01,0.5,\n2,0.01,nan,0.4\n3, 0.01 ,inf,oops\n");
  ASSERT_EQ(t.rows(), 3u);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"epoch", "lr", "train_loss", "val_loss"}));
  EXPECT_EQ((*t.column("epoch"))[2], 3);
  EXPECT_DOUBLE_EQ((*t.column("lr"))[2], 0.01);  // blanks around a field
  EXPECT_TRUE(std::isnan((*t.column("val_loss"))[0]));
  EXPECT_TRUE(std::isnan((*t.column("train_loss"))[1]));
  EXPECT_TRUE(std::isinf((*t.column("train_loss"))[2]));
  EXPECT_TRUE(std::isnan((*t.column("val_loss"))[2]));
  EXPECT_EQ(t.column("val_dice"), nullptr);
}

TEST(ProgressPlot, PartialLastLineIsIgnored) {
  const auto t = table_of("epoch,train_loss,val_loss\n1,0.5,0.6\n2,0.4,0.5\n3,0.3");
  ASSERT_EQ(t.rows(), 2u);
  EXPECT_EQ((*t.column("epoch"))[1], 2);
  const Image im = decode(render_progress_png(t, "partial"));
  EXPECT_GT(count_in(im, series_color("train_loss"), plot_layout(im.width, im.height).loss), 20);
}

TEST(ProgressPlot, ResumedFileKeepsTheRowsWrittenAfterTheResume) {
  // Epochs 1..6, then a resume from the checkpoint of epoch 3 wrote 4..8 again.
  const auto t = table_of("epoch,train_loss\n1,1\n2,1\n3,1\n4,9\n5,9\n6,9\n4,0.4\n5,0.5\n6,0.6\n7,0.7\n8,0.8\n");
  ASSERT_EQ(t.rows(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ((*t.column("epoch"))[i], i + 1.0);
  EXPECT_DOUBLE_EQ((*t.column("train_loss"))[3], 0.4);
  EXPECT_DOUBLE_EQ((*t.column("train_loss"))[7], 0.8);
}

TEST(ProgressPlot, UnreadableFilesAreIoErrorsNamingThem) {
  TempDir dir;
  auto message_of = [](const fs::path& p) {
    try {
      read_metrics_csv(p);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no IoError");
  };
  const std::string missing = message_of(dir / "absent.csv");
  EXPECT_NE(missing.find((dir / "absent.csv").string()), std::string::npos) << missing;
  write_text(dir / "empty.csv", "");
  EXPECT_NE(message_of(dir / "empty.csv").find("empty.csv: empty"), std::string::npos);
  write_text(dir / "no_epoch.csv", "step,lr\n1,0.1\n");
  EXPECT_NE(message_of(dir / "no_epoch.csv").find("no_epoch.csv: line 1: no \"epoch\""), std::string::npos);
  write_text(dir / "short.csv", "epoch,lr\n1,0.1\n2\n3,0.1\n");
  EXPECT_NE(message_of(dir / "short.csv").find("short.csv: line 3: 1 fields, expected 2"), std::string::npos);
  write_text(dir / "bad_epoch.csv", "epoch,lr\n1,0.1\nx,0.1\n");
  EXPECT_NE(message_of(dir / "bad_epoch.csv").find("line 3: epoch \"x\""), std::string::npos);
}

TEST(ProgressPlot, SeriesColoursAreFixedAndDistinct) {
  std::vector<std::string> names = kSegSeries;
  names.insert(names.end(), {"val_mae", "val_dose_score", "val_dvh_score", "best"});
  for (size_t i = 0; i < names.size(); ++i) {
    const Rgb a = series_color(names[i]);
    EXPECT_FALSE(a.r == a.g && a.g == a.b && names[i] != "best") << names[i] << " is grey";
    for (size_t j = i + 1; j < names.size(); ++j) {
      const Rgb b = series_color(names[j]);
      const int diff = std::max({std::abs(a.r - b.r), std::abs(a.g - b.g), std::abs(a.b - b.b)});
      EXPECT_GE(diff, 50) << names[i] << " vs " << names[j];
    }
  }
  EXPECT_EQ(series_color("samples_per_second"), (Rgb{128, 128, 128}));
}

TEST(ProgressPlot, SegmentationSeriesAreDrawnInTheirOwnPanels) {
  png_uint_32 format = 0;
  const Image im = decode(render_progress_png(table_of(make_csv(kSegColumns, range(1, 40))), "seg"), &format);
  EXPECT_EQ(format, png_uint_32{PNG_FORMAT_RGB});
  ASSERT_EQ(im.width, kProgressPlotWidth);
  ASSERT_EQ(im.height, kProgressPlotHeight);
  const PlotLayout l = plot_layout(im.width, im.height);
  expect_series_in_own_panel(im, l, kSegSeries);
  // The best-epoch line: in the loss panel at epoch 30 only.
  const Rgb best = series_color("best");
  const double x30 = x_pixel(30, 1, 40, l.loss);
  EXPECT_GT(count_in_columns(im, best, l.loss, x30 - 2, x30 + 2), 50);
  EXPECT_EQ(count_in_columns(im, best, l.loss, l.loss.x + 3, x30 - 6), 0);
  EXPECT_EQ(count_in(im, best, l.time) + count_in(im, best, l.lr), 0);
}

TEST(ProgressPlot, DoseSeriesAreDrawnInTheirOwnPanels) {
  const Image im = decode(
      render_progress_png(table_of(make_csv(kDoseColumns, range(1, 3))), "dose", /*width=*/1200, /*height=*/1350));
  ASSERT_EQ(im.width, 1200);
  ASSERT_EQ(im.height, 1350);
  expect_series_in_own_panel(im, plot_layout(im.width, im.height), kDoseSeries);
}

TEST(ProgressPlot, PointsLandInTheColumnsOfTheirEpochs) {
  // lr only at epoch 7 (a lone dot); train_loss from epoch 3 to 15 (a line with dots at its ends).
  const auto t = table_of(make_csv({"epoch", "lr", "train_loss"}, range(1, 20), [](const std::string& c, int e) {
    if (c == "lr") return e == 7 ? std::string("0.01") : std::string();
    if (c == "train_loss") return e >= 3 && e <= 15 ? std::to_string(1.0 / e) : std::string();
    return default_field(c, e);
  }));
  const Image im = decode(render_progress_png(t, "points"));
  const PlotLayout l = plot_layout(im.width, im.height);
  const Rgb lr = series_color("lr"), train = series_color("train_loss");
  const double x7 = x_pixel(7, 1, 20, l.lr);
  EXPECT_GT(count_in_columns(im, lr, l.lr, x7 - 2, x7 + 2), 5);
  EXPECT_EQ(count_in_columns(im, lr, l.lr, l.lr.x, x7 - 8) + count_in_columns(im, lr, l.lr, x7 + 8, l.lr.right()), 0);
  const auto [first, last] = column_span(im, train, l.loss);
  EXPECT_NEAR(first, x_pixel(3, 1, 20, l.loss), 5);
  EXPECT_NEAR(last, x_pixel(15, 1, 20, l.loss), 5);
}

TEST(ProgressPlot, GapsBreakTheLines) {
  // val_loss missing (empty, nan, inf) on epochs 11..19 of 30; train_loss complete.
  const auto t = table_of(make_csv(kSegColumns, range(1, 30), [](const std::string& c, int e) {
    if (c == "val_loss" && e >= 11 && e <= 19) return std::string(e == 12 ? "nan" : e == 15 ? "inf" : "");
    return default_field(c, e);
  }));
  const Image im = decode(render_progress_png(t, "gap"));
  const PlotLayout l = plot_layout(im.width, im.height);
  const Rgb val = series_color("val_loss");
  auto x = [&](double e) { return x_pixel(e, 1, 30, l.loss); };
  EXPECT_EQ(count_in_columns(im, val, l.loss, x(10) + 6, x(20) - 6), 0);
  EXPECT_GT(count_in_columns(im, val, l.loss, x(4), x(6)), 10);
  EXPECT_GT(count_in_columns(im, val, l.loss, x(24), x(26)), 10);
  EXPECT_GT(count_in_columns(im, series_color("train_loss"), l.loss, x(14), x(16)), 10);
}

TEST(ProgressPlot, SingleEpochIsVisible) {
  const Image im = decode(render_progress_png(table_of(make_csv(kSegColumns, {5})), "one epoch"));
  const PlotLayout l = plot_layout(im.width, im.height);
  expect_series_in_own_panel(im, l, kSegSeries);
  const double x = x_pixel(5, 5, 5, l.loss);
  EXPECT_DOUBLE_EQ(x, l.loss.x + l.loss.width / 2);
  EXPECT_GT(count_in_columns(im, series_color("lr"), l.lr, x - 2, x + 2), 5);
}

TEST(ProgressPlot, ConstantSeriesSitsInTheMiddle) {
  const auto t = table_of(make_csv({"epoch", "lr", "train_loss"}, range(1, 10), [](const std::string& c, int e) {
    return c == "epoch" ? std::to_string(e) : std::string("0.003");
  }));
  const Image im = decode(render_progress_png(t, "constant"));
  const PlotLayout l = plot_layout(im.width, im.height);
  for (const auto* name : {"lr", "train_loss"}) {
    const PlotRect& r = panel_of(l, name);
    const Rgb c = series_color(name);
    const double mid = r.y + r.height / 2;
    EXPECT_GT(count(im, c, r.x, r.right(), mid - 3, mid + 3), 200) << name;
    EXPECT_EQ(count(im, c, r.x, r.right(), r.y, mid - 8) + count(im, c, r.x, r.right(), mid + 8, r.bottom()), 0);
    const auto [first, last] = column_span(im, c, r);
    EXPECT_NEAR(first, x_pixel(1, 1, 10, r), 5) << name;
    EXPECT_NEAR(last, x_pixel(10, 1, 10, r), 5) << name;
  }
}

TEST(ProgressPlot, LearningRateSpanningDecadesIsLogScaled) {
  // 1e-2 down to 1e-4 geometrically: a straight line on a log axis, 1e-3 (epoch 11) in the middle.
  const auto t = table_of(make_csv({"epoch", "lr"}, range(1, 21), [](const std::string& c, int e) {
    return c == "epoch" ? std::to_string(e) : std::to_string(1e-2 * std::pow(10.0, -(e - 1) / 10.0));
  }));
  const Image im = decode(render_progress_png(t, "log lr"));
  const PlotRect& r = plot_layout(im.width, im.height).lr;
  const double x = x_pixel(11, 1, 21, r), mid = r.y + r.height / 2;
  EXPECT_GT(count(im, series_color("lr"), x - 1, x + 1, mid - 4, mid + 4), 2);
}

TEST(ProgressPlot, EmptyTableSaysNoEpochsYet) {
  const auto t = table_of(make_csv(kSegColumns, {}));
  EXPECT_EQ(t.rows(), 0u);
  const Image im = decode(render_progress_png(t, "empty"));
  ASSERT_EQ(im.width, kProgressPlotWidth);
  const PlotLayout l = plot_layout(im.width, im.height);
  for (const PlotRect* r : {&l.loss, &l.time, &l.lr}) {
    EXPECT_GT(note_pixels(im, *r), 100);
    for (const auto& name : kSegSeries) EXPECT_EQ(count_in(im, series_color(name), *r), 0) << name;
  }
}

TEST(ProgressPlot, OlderFilesWithFewerColumns) {
  const auto header_only = table_of("epoch,train_loss,val_loss\n");
  EXPECT_EQ(header_only.rows(), 0u);
  const Image empty = decode(render_progress_png(header_only, "old, empty"));
  EXPECT_GT(note_pixels(empty, plot_layout(empty.width, empty.height).loss), 100);

  const Image im = decode(render_progress_png(table_of(make_csv({"epoch", "train_loss"}, range(1, 12))), "old"));
  const PlotLayout l = plot_layout(im.width, im.height);
  EXPECT_GT(count_in(im, series_color("train_loss"), l.loss), 20);
  EXPECT_EQ(note_pixels(im, l.loss), 0);
  EXPECT_GT(note_pixels(im, l.time), 100);  // "no epoch_seconds or data_share columns ..."
  EXPECT_GT(note_pixels(im, l.lr), 100);
}

TEST(ProgressPlot, ThousandEpochsStayThinLinesAndLonePointsShow) {
  // val_dice every 50 epochs only (validation cadence): points with no neighbour, drawn as dots.
  const auto t = table_of(make_csv(kSegColumns, range(1, 1000), [](const std::string& c, int e) {
    return c == "val_dice" && e % 50 != 0 ? std::string() : default_field(c, e);
  }));
  const Image im = decode(render_progress_png(t, "long"));
  const PlotLayout l = plot_layout(im.width, im.height);
  expect_series_in_own_panel(im, l, kSegSeries);
  // A thin line, no dots: one column of the straight train_loss line holds only a few of its pixels.
  const double x = x_pixel(500, 1, 1000, l.loss);
  EXPECT_LE(count_in_columns(im, series_color("train_loss"), l.loss, x, x), 3);
  EXPECT_GT(count_in_columns(im, series_color("val_dice"), l.loss, x - 2, x + 2), 5);
  EXPECT_EQ(count_in_columns(im, series_color("val_dice"), l.loss, x + 8, x_pixel(550, 1, 1000, l.loss) - 8), 0);
}

TEST(ProgressPlot, WritesPngAndSvgAndNoTemporaries) {
  TempDir dir;
  const auto t = table_of(make_csv(kSegColumns, range(1, 5)));
  write_progress_plot(t, {dir / "progress.png", dir / "progress.svg"}, "run");
  write_progress_plot(t, {dir / "progress.png", dir / "progress.svg"}, "run again");  // replaces both
  std::ifstream png_in(dir / "progress.png", std::ios::binary), svg_in(dir / "progress.svg");
  const std::string png((std::istreambuf_iterator<char>(png_in)), {}),
      svg((std::istreambuf_iterator<char>(svg_in)), {});
  const Image im = decode(png);
  EXPECT_EQ(im.width, kProgressPlotWidth);
  EXPECT_EQ(im.height, kProgressPlotHeight);
  EXPECT_TRUE(svg.rfind("<?xml", 0) == 0 || svg.rfind("<svg", 0) == 0) << svg.substr(0, 40);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 2u);
  write_progress_plot(t, {dir / "only.png", {}}, "png only");
  EXPECT_TRUE(fs::exists(dir / "only.png"));
  EXPECT_THROW(write_progress_plot(t, {dir / "absent" / "p.png", {}}, "x"), IoError);
  EXPECT_THROW(render_progress_png(t, "tiny", /*width=*/100, /*height=*/100), std::invalid_argument);
}

TEST(ProgressPlot, EncodePngRoundTrips) {
  const uint8_t rgb[2 * 3 * 3] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90};
  png_uint_32 format = 0;
  Image im = decode(encode_png(rgb, /*height=*/2, /*width=*/3, /*channels=*/3), &format);
  EXPECT_EQ(format, png_uint_32{PNG_FORMAT_RGB});
  ASSERT_EQ(im.width, 3);
  ASSERT_EQ(im.height, 2);
  EXPECT_EQ(im.rgb, std::vector<uint8_t>(std::begin(rgb), std::end(rgb)));
  const uint8_t gray[4] = {0, 85, 170, 255};
  im = decode(encode_png(gray, /*height=*/4, /*width=*/1, /*channels=*/1), &format);
  EXPECT_EQ(format, png_uint_32{PNG_FORMAT_GRAY});
  ASSERT_EQ(im.height, 4);
  for (int y = 0; y < 4; ++y) EXPECT_TRUE(near(im.at(0, y), Rgb{gray[y], gray[y], gray[y]}, /*tolerance=*/0));
  EXPECT_THROW(encode_png(rgb, /*height=*/2, /*width=*/3, /*channels=*/2), std::invalid_argument);
  EXPECT_THROW(encode_png(rgb, /*height=*/0, /*width=*/3, /*channels=*/3), std::invalid_argument);
  EXPECT_THROW(encode_png(nullptr, /*height=*/2, /*width=*/3, /*channels=*/3), std::invalid_argument);
}

}  // namespace
}  // namespace u3d
