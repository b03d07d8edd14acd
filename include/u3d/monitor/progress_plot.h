// <run>/progress.png (and progress.svg): nnU-Net-style training curves drawn from metrics.csv with
// Cairo, three panels stacked over one epoch axis:
//
//   loss      train_loss and val_loss (left axis); on a right axis the validation metrics that
//             are present: val_pseudo_dice, val_pseudo_dice_ema, val_dice (Dice, 0..1, higher is
//             better) or, when none of those is, val_mae, val_dose_score, val_dvh_score (Gy, lower
//             is better); a dashed vertical line at the best epoch (the last row with best == 1)
//   time      epoch_seconds (left, s, from 0) and data_share (right, shown in %, from 0)
//   lr        lr, on a log axis when its positive values span a factor >= 10 (0 is a gap there)
//
// Missing values (empty, nan or inf fields) break a line: nothing connects across them, and a
// point with no neighbour (a validation every N epochs) is drawn as a dot. Every point gets a dot
// when there are few (>= 12 px apart); left-axis dots are larger than right-axis ones, so where
// they meet (one epoch: both ranges end there) both show. Lines thin out past 300 epochs. A
// constant series gets a padded range. Columns a run did not write (older runs) are skipped; a
// panel with none of its columns says so. A table with no rows (or no "epoch" column) draws the
// empty panels with "no epochs yet". The title line: `title`, then the epoch span. Each series
// has a fixed colour (series_color()). Sizes are pixels (PNG) or points (SVG), drawn by the same
// code, everything scaled with the image; text is Cairo's toy text API in "DejaVu Sans"
// (fonts-dejavu-core).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "u3d/monitor/metrics_csv.h"

namespace u3d {

// 8-bit RGB.
struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};
// The fixed colour of the series of metrics.csv column `column` (all distinct, none grey), and of
// "best" (the dashed best-epoch line, dark grey); any other name gets mid grey (128, 128, 128).
Rgb series_color(const std::string& column);

// A rectangle in pixels, y down: the area inside one panel's axes frame.
struct PlotRect {
  double x = 0, y = 0, width = 0, height = 0;
  double right() const { return x + width; }
  double bottom() const { return y + height; }
};
// Where the panels' plot areas lie in an image of `width` x `height` pixels (top to bottom). The
// legends sit above each area, the tick labels outside it, so inside holds only curves, grid and
// the best-epoch line.
struct PlotLayout {
  PlotRect loss, time, lr;
  double scale = 1;  // sizes (text, lines, margins) relative to the default image size
};
PlotLayout plot_layout(int width, int height);

// The pixel column of `epoch` in `rect` when the table's epochs run from `first` to `last` (its
// first and last row): the span fills the rect less 2% of its width on each side (so end dots are
// whole); first == last puts it in the middle.
inline double x_pixel(double epoch, double first, double last, const PlotRect& rect) {
  if (!(last > first)) return rect.x + rect.width / 2;
  const double inset = 0.02 * rect.width;
  return rect.x + inset + (epoch - first) / (last - first) * (rect.width - 2 * inset);
}

// The default image size (pixels): three panels of about 560 px.
constexpr int kProgressPlotWidth = 1600;
constexpr int kProgressPlotHeight = 1800;

// Output paths; an empty path is not written.
struct PlotFiles {
  std::filesystem::path png, svg;
};

// Draws `table` at the default size and writes `out.png` and `out.svg`, each atomically
// (write_file_atomic: a reader never sees half a file). `title` heads the image (e.g. the run
// folder's name). IoError naming the file when it cannot be written or Cairo fails.
void write_progress_plot(const MetricsTable& table, const PlotFiles& out, const std::string& title);

// The same drawing as PNG bytes in memory (for TensorBoard images): an 8-bit RGB PNG (colorspace
// 3, no alpha) of `width` x `height` pixels. std::invalid_argument for a size below 200 x 200.
std::string render_progress_png(const MetricsTable& table, const std::string& title, int width = kProgressPlotWidth,
                                int height = kProgressPlotHeight);

// Encodes an 8-bit image, row-major `height` x `width` x `channels`, as PNG bytes via Cairo: 1
// channel as an 8-bit gray PNG, 3 as 8-bit RGB (TensorBoard's Image colorspace: `channels`).
// std::invalid_argument for a null pointer, a size < 1 or another channel count.
std::string encode_png(const uint8_t* pixels, int height, int width, int channels);

}  // namespace u3d
