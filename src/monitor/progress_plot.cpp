#include "u3d/monitor/progress_plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"

namespace u3d {
namespace {

constexpr double kNoValue = NAN;

struct SeriesInfo {
  const char* column;
  const char* label;  // legend text
  Rgb color;
};
// The fixed series colours (tab10-like; none grey; any two differ by >= 50 in some channel).
constexpr SeriesInfo kSeries[] = {
    {"train_loss", "train loss", {31, 119, 180}},                   // blue
    {"val_loss", "val loss", {214, 39, 40}},                        // red
    {"val_pseudo_dice", "pseudo Dice", {44, 160, 44}},              // green
    {"val_pseudo_dice_ema", "pseudo Dice (EMA)", {148, 103, 189}},  // purple
    {"val_dice", "val Dice", {255, 127, 14}},                       // orange
    {"val_mae", "val MAE", {188, 140, 0}},                          // dark gold
    {"val_dose_score", "dose score", {23, 190, 207}},               // cyan
    {"val_dvh_score", "DVH score", {227, 119, 194}},                // pink
    {"epoch_seconds", "epoch time", {140, 86, 75}},                 // brown
    {"data_share", "data wait", {0, 128, 128}},                     // teal
    {"gpu_busy", "GPU busy", {118, 190, 0}},                        // lime
    {"lr", "learning rate", {170, 20, 120}},                        // wine
    {"best", "best epoch", {70, 70, 70}},                           // dark grey, the dashed line
};
constexpr Rgb kOtherColor{128, 128, 128}, kTextColor{30, 30, 30}, kFrameColor{110, 110, 110}, kGridColor{226, 226, 226},
    kNoteColor{120, 120, 120}, kBestColor = kSeries[12].color;

const SeriesInfo* series_info(const std::string& column) {
  const auto it =
      std::find_if(std::begin(kSeries), std::end(kSeries), [&](const auto& s) { return column == s.column; });
  return it == std::end(kSeries) ? nullptr : it;
}

// Sizes below are pixels at the default image size; all scale with the image (PlotLayout::scale).
constexpr double kTitleBand = 64, kLegendBand = 46, kBottomBand = 80, kSideMargin = 135;

struct Series {
  const SeriesInfo* info;
  const std::vector<double>* values;
};

struct Axis {
  bool has_data = false, log = false;
  double lo = 0, hi = 1;
  double label_scale = 1;  // tick labels show value * label_scale (100: percent)
  bool drawable(double v) const { return std::isfinite(v) && (!log || v > 0); }
  double y(double v, const PlotRect& r) const {
    const double t = log ? std::log10(v / lo) / std::log10(hi / lo) : (v - lo) / (hi - lo);
    return r.bottom() - t * r.height;
  }
};

// The range of `series`: the finite values padded by 5% (constant ones by 10%, or +-1 around 0),
// from 0 when `from_zero`; log when `may_log` and the positive values span a factor >= 10.
Axis make_axis(const std::vector<Series>& series, bool from_zero, bool may_log) {
  Axis a;
  double lo = INFINITY, hi = -INFINITY, positive_lo = INFINITY;
  for (const auto& s : series) {
    for (double v : *s.values) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v), hi = std::max(hi, v);
      if (v > 0) positive_lo = std::min(positive_lo, v);
    }
  }
  if (lo > hi) return a;
  a.has_data = true;
  if (may_log && hi >= 10 * positive_lo) {
    const double pad = std::pow(hi / positive_lo, 0.05);
    a.log = true, a.lo = positive_lo / pad, a.hi = hi * pad;
    return a;
  }
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  const double pad = hi > lo ? 0.05 * (hi - lo) : lo == 0 ? 1.0 : 0.1 * std::abs(lo);
  a.lo = from_zero && lo == 0 ? 0.0 : lo - pad, a.hi = hi + pad;
  return a;
}

struct Tick {
  double value;
  std::string label;  // empty: a minor tick
};

// Ticks at 1-2-5 steps, about `target` of them in [lo, hi]; labels in display units (value *
// scale): fixed with the step's decimals, or "m.mme-x" for tiny or huge values. lo == hi: one tick.
std::vector<Tick> linear_ticks(double lo, double hi, double target, double scale, bool integer) {
  if (!(hi > lo)) return {{lo, fmt::format("{:g}", lo * scale)}};
  const double dlo = lo * scale, dhi = hi * scale, raw = (dhi - dlo) / std::max(target, 1.0);
  const double mag = std::pow(10.0, std::floor(std::log10(raw))), r = raw / mag;
  const double step = std::max(mag * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10), integer ? 1.0 : 0.0);
  const int step_exp = static_cast<int>(std::floor(std::log10(step) + 1e-9));
  const int top_exp = static_cast<int>(std::floor(std::log10(std::max(std::abs(dlo), std::abs(dhi)))));
  const bool sci = step_exp < -5 || top_exp >= 6;
  std::vector<Tick> ticks;
  for (double k = std::ceil(dlo / step - 1e-9); k * step <= dhi + 1e-9 * step; k += 1) {
    const double v = std::abs(k) < 0.5 ? 0.0 : k * step;
    const std::string label =
        sci ? fmt::format("{:.{}f}e{}", v / std::pow(10.0, top_exp), std::max(0, top_exp - step_exp), top_exp)
            : fmt::format("{:.{}f}", v, std::max(0, -step_exp));
    ticks.push_back({v / scale, label});
  }
  return ticks;
}

// Log axis: decades labelled "1e-3", with at most 2.5 decades 2 and 5 too; the other multiples minor.
std::vector<Tick> log_ticks(double lo, double hi) {
  const bool with_25 = hi / lo <= std::pow(10.0, 2.5);
  std::vector<Tick> ticks;
  for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= static_cast<int>(std::ceil(std::log10(hi))); ++e) {
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, e);
      const bool major = m == 1 || (with_25 && (m == 2 || m == 5));
      if (v >= lo && v <= hi) ticks.push_back({v, major ? fmt::format("{}e{}", m, e) : std::string()});
    }
  }
  return ticks;
}

void set_color(cairo_t* cr, Rgb c) { cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0); }

double text_width(cairo_t* cr, const std::string& text, double size, bool bold = false) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, text.c_str(), &e);
  return e.x_advance;
}

// `text` with the middle of its line box at y; halign 0 left, 0.5 centre, 1 right; `angle` turns it
// about (x, y). Returns its width.
double draw_text(cairo_t* cr, const std::string& text, double x, double y, double size, double halign,
                 Rgb color = kTextColor, double angle = 0, bool bold = false) {
  const double w = text_width(cr, text, size, bold);
  cairo_font_extents_t fe;
  cairo_font_extents(cr, &fe);
  cairo_save(cr);
  set_color(cr, color);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -halign * w, (fe.ascent - fe.descent) / 2);
  cairo_show_text(cr, text.c_str());
  cairo_restore(cr);
  return w;
}

void line(cairo_t* cr, double x0, double y0, double x1, double y1, Rgb color, double width, double dash = 0) {
  const double dashes[] = {dash, 0.75 * dash};
  set_color(cr, color);
  cairo_set_line_width(cr, width);
  cairo_set_dash(cr, dashes, dash > 0 ? 2 : 0, 0);
  cairo_move_to(cr, x0, y0);
  cairo_line_to(cr, x1, y1);
  cairo_stroke(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
}

struct Frame {  // what the panels share
  cairo_t* cr;
  double s;  // PlotLayout::scale
  const std::vector<double>* epochs;
  double first, last;  // the epoch axis
};

// Runs of drawable values as lines, a run of one as a dot (1.3 `radius`), dots on all when few (>= 12 px
// apart). Left-axis dots are larger: where they meet right-axis ones (one epoch) a ring stays visible.
void draw_series(const Frame& f, const Series& se, const Axis& ax, const PlotRect& r, double radius) {
  cairo_t* cr = f.cr;
  const auto& v = *se.values;
  const size_t n = std::min(v.size(), f.epochs->size());
  const bool dots = n <= r.width / (12 * f.s);
  set_color(cr, se.info->color);
  cairo_set_line_width(cr, std::max(1.0, (n > 300 ? 1.6 : 2.4) * f.s));
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  auto x_of = [&](size_t i) { return x_pixel((*f.epochs)[i], f.first, f.last, r); };
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && ax.drawable(v[j])) ++j;  // [i, j): one run
    if (j - i > 1) {
      cairo_move_to(cr, x_of(i), ax.y(v[i], r));
      for (size_t k = i + 1; k < j; ++k) cairo_line_to(cr, x_of(k), ax.y(v[k], r));
      cairo_stroke(cr);
    }
    for (size_t k = i; (dots || j - i == 1) && k < j; ++k) {
      cairo_new_sub_path(cr);
      cairo_arc(cr, x_of(k), ax.y(v[k], r), (j - i == 1 ? 1.3 : 1.0) * radius * f.s, 0, 2 * M_PI);
    }
    cairo_fill(cr);
    i = std::max(j, i + 1);
  }
}

// One y axis on side -1 (left) or +1 (right) of `r`: tick marks and labels, the turned axis label
// and, when `grid`, grid lines at the labelled ticks.
void draw_y_axis(const Frame& f, const Axis& a, const std::string& label, const PlotRect& r, int side, bool grid) {
  const double edge = side < 0 ? r.x : r.right(), size = 17 * f.s;
  const auto ticks = !a.has_data ? std::vector<Tick>{}
                     : a.log     ? log_ticks(a.lo, a.hi)
                                 : linear_ticks(a.lo, a.hi, r.height / (85 * f.s), a.label_scale, /*integer=*/false);
  double widest = 0;
  for (const auto& t : ticks) {
    const double y = a.y(t.value, r);
    if (grid && !t.label.empty()) line(f.cr, r.x, y, r.right(), y, kGridColor, 1.0 * f.s);
    line(f.cr, edge, y, edge + side * (t.label.empty() ? 3 : 6) * f.s, y, kFrameColor, 1.2 * f.s);
    if (t.label.empty()) continue;
    widest = std::max(widest, draw_text(f.cr, t.label, edge + side * 10 * f.s, y, size, /*halign=*/side < 0 ? 1 : 0));
  }
  const double room = (kSideMargin - 10) * f.s - widest;  // between the tick labels and the image edge
  const double x = edge + side * (10 * f.s + widest + std::max(room / 2, 12 * f.s));
  draw_text(f.cr, label, x, r.y + r.height / 2, 19 * f.s, /*halign=*/0.5, kTextColor, side * M_PI / 2);
}

struct PanelSpec {
  std::vector<Series> left, right;
  std::string left_label, right_label;
  std::string missing;                       // said when the table has none of the panel's columns
  bool from_zero = false, log_left = false;  // both axes from 0; a log left axis when its data span >= 10x
  double right_label_scale = 1;              // 100: the right axis in percent
  double best_epoch = kNoValue;              // a dashed line there when finite
};

// The legend of `p` in one row above `r`, from its left edge; a smaller font when it would not fit.
void draw_legend(const Frame& f, const PanelSpec& p, const PlotRect& r) {
  std::vector<std::pair<std::string, Rgb>> entries;  // the best-epoch entry dashed, the others solid
  for (const auto* group : {&p.left, &p.right}) {
    for (const auto& se : *group) entries.emplace_back(se.info->label, se.info->color);
  }
  if (std::isfinite(p.best_epoch)) entries.emplace_back(fmt::format("best epoch {:g}", p.best_epoch), kBestColor);
  const double swatch = 30 * f.s, gap = 8 * f.s, spacing = 28 * f.s, y = r.y - kLegendBand * f.s / 2;
  double size = 19 * f.s, total = 0, x = r.x;
  for (const auto& e : entries) total += swatch + gap + text_width(f.cr, e.first, size) + spacing;
  if (total > r.width) size *= r.width / total;
  for (const auto& [label, color] : entries) {
    const bool dashed = color == kBestColor;
    line(f.cr, x, y, x + swatch, y, color, 2.6 * f.s, /*dash=*/dashed ? 6 * f.s : 0);
    x += swatch + gap + draw_text(f.cr, label, x + swatch + gap, y, size, /*halign=*/0) + spacing;
  }
}

void draw_panel(const Frame& f, const PanelSpec& p, const PlotRect& r) {
  cairo_t* cr = f.cr;
  const Axis left = make_axis(p.left, p.from_zero, /*may_log=*/p.log_left);
  Axis right = make_axis(p.right, p.from_zero, /*may_log=*/false);
  right.label_scale = p.right_label_scale;
  // Grid, ticks and labels first, the curves over them: epochs below, the grid of the left axis
  // (of the right one when the left has no values).
  if (!f.epochs->empty()) {
    for (const auto& t : linear_ticks(f.first, f.last, r.width / (120 * f.s), /*scale=*/1, /*integer=*/true)) {
      const double x = x_pixel(t.value, f.first, f.last, r);
      line(cr, x, r.y, x, r.bottom(), kGridColor, 1.0 * f.s);
      line(cr, x, r.bottom(), x, r.bottom() + 6 * f.s, kFrameColor, 1.2 * f.s);
      draw_text(cr, t.label, x, r.bottom() + 20 * f.s, 17 * f.s, /*halign=*/0.5);
    }
  }
  draw_text(cr, "epoch", r.x + r.width / 2, r.bottom() + 50 * f.s, 19 * f.s, /*halign=*/0.5);
  if (!p.left.empty()) draw_y_axis(f, left, p.left_label, r, /*side=*/-1, /*grid=*/left.has_data);
  if (!p.right.empty()) draw_y_axis(f, right, p.right_label, r, /*side=*/1, /*grid=*/!left.has_data);
  draw_legend(f, p, r);
  cairo_save(cr);  // the curves, clipped to the plot area
  cairo_rectangle(cr, r.x, r.y, r.width, r.height);
  cairo_clip(cr);
  if (std::isfinite(p.best_epoch)) {
    const double x = std::round(x_pixel(p.best_epoch, f.first, f.last, r));  // crisp: whole pixels
    line(cr, x, r.y, x, r.bottom(), kBestColor, 2 * f.s, /*dash=*/8 * f.s);
  }
  for (const auto& se : p.left) draw_series(f, se, left, r, /*radius=*/4.4);
  for (const auto& se : p.right) draw_series(f, se, right, r, /*radius=*/3.0);
  cairo_restore(cr);
  set_color(cr, kFrameColor);
  cairo_set_line_width(cr, 1.2 * f.s);
  cairo_rectangle(cr, r.x, r.y, r.width, r.height);
  cairo_stroke(cr);
  const std::string note = f.epochs->empty()                   ? "no epochs yet"
                           : p.left.empty() && p.right.empty() ? p.missing
                           : !left.has_data && !right.has_data ? "no values yet"
                                                               : "";
  draw_text(cr, note, r.x + r.width / 2, r.y + r.height / 2, 26 * f.s, /*halign=*/0.5, kNoteColor);
}

// The series of `names` that `table` has, in that order.
std::vector<Series> present(const MetricsTable& table, std::initializer_list<const char*> names) {
  std::vector<Series> out;
  for (const char* name : names) {
    if (const auto* values = table.column(name)) out.push_back({series_info(name), values});
  }
  return out;
}

void draw_progress(cairo_t* cr, const MetricsTable& table, const std::string& title, int width, int height) {
  static const std::vector<double> kNoEpochs;
  const std::vector<double>* epochs = table.column("epoch") ? table.column("epoch") : &kNoEpochs;
  const PlotLayout layout = plot_layout(width, height);
  const auto [first, last] = std::minmax_element(epochs->begin(), epochs->end());
  const Frame f{cr, layout.scale, epochs, epochs->empty() ? 0 : *first, epochs->empty() ? 0 : *last};
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);

  PanelSpec loss{present(table, {"train_loss", "val_loss"}),
                 present(table, {"val_pseudo_dice", "val_pseudo_dice_ema", "val_dice"}), "loss",
                 "Dice (higher is better)", "no loss or validation columns in metrics.csv"};
  if (loss.right.empty()) {
    loss.right = present(table, {"val_mae", "val_dose_score", "val_dvh_score"});
    loss.right_label = "Gy (lower is better)";
  }
  const auto* best = table.column("best");
  for (size_t i = 0; best && i < std::min(best->size(), epochs->size()); ++i) {
    if ((*best)[i] == 1) loss.best_epoch = (*epochs)[i];
  }
  const PanelSpec time{present(table, {"epoch_seconds"}),
                       present(table, {"data_share", "gpu_busy"}),
                       "epoch time (s)",
                       "data wait, GPU busy (% of epoch)",
                       "no epoch_seconds or data_share columns in metrics.csv",
                       /*from_zero=*/true,
                       /*log_left=*/false,
                       /*right_label_scale=*/100};
  const PanelSpec lr{present(table, {"lr"}), {}, "learning rate", "", "no lr column in metrics.csv",
                     /*from_zero=*/false,
                     /*log_left=*/true};
  draw_panel(f, loss, layout.loss);
  draw_panel(f, time, layout.time);
  draw_panel(f, lr, layout.lr);

  // The title, then the epoch span in grey, cut at the plots' right edge.
  const std::string span = epochs->empty()       ? std::string("no epochs yet")
                           : epochs->size() == 1 ? fmt::format("epoch {:g}", f.last)
                                                 : fmt::format("epochs {:g}\u2013{:g}", f.first, f.last);
  const double y = (kTitleBand / 2 + 4) * f.s, x = layout.loss.x;
  cairo_save(cr);
  cairo_rectangle(cr, 0, 0, layout.loss.right(), kTitleBand * f.s);
  cairo_clip(cr);
  const double title_width = draw_text(cr, title, x, y, 26 * f.s, /*halign=*/0, kTextColor, /*angle=*/0, /*bold=*/true);
  draw_text(cr, span, x + title_width + (title.empty() ? 0 : 24 * f.s), y, 20 * f.s, /*halign=*/0, kNoteColor);
  cairo_restore(cr);
}

cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void check_cairo(cairo_status_t status, const std::string& what) {
  if (status != CAIRO_STATUS_SUCCESS) throw IoError(fmt::format("{}: Cairo: {}", what, cairo_status_to_string(status)));
}

using SurfacePtr = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

// The drawing as PNG (an RGB24 image surface) or SVG bytes; Cairo errors name `what`.
std::string render(const MetricsTable& table, const std::string& title, int width, int height, bool svg,
                   const std::string& what) {
  if (width < 200 || height < 200) {
    throw std::invalid_argument(fmt::format("progress plot: size {}x{} is below 200x200", width, height));
  }
  std::string bytes;
  SurfacePtr surface(svg ? cairo_svg_surface_create_for_stream(append_bytes, &bytes, width, height)
                         : cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height),
                     cairo_surface_destroy);
  check_cairo(cairo_surface_status(surface.get()), what);
  {
    std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()), cairo_destroy);
    draw_progress(cr.get(), table, title, width, height);
    check_cairo(cairo_status(cr.get()), what);
  }
  if (svg) cairo_surface_finish(surface.get());  // writes the rest of the document into `bytes`
  check_cairo(svg ? cairo_surface_status(surface.get())
                  : cairo_surface_write_to_png_stream(surface.get(), append_bytes, &bytes),
              what);
  return bytes;
}

}  // namespace

Rgb series_color(const std::string& column) {
  const SeriesInfo* info = series_info(column);
  return info ? info->color : kOtherColor;
}

PlotLayout plot_layout(int width, int height) {
  const double s = std::min(width / double{kProgressPlotWidth}, height / double{kProgressPlotHeight});
  const double panel = (height - (kTitleBand + 8) * s) / 3;
  auto rect = [&](int i) {
    return PlotRect{kSideMargin * s, (kTitleBand + kLegendBand) * s + i * panel, width - 2 * kSideMargin * s,
                    panel - (kLegendBand + kBottomBand) * s};
  };
  return PlotLayout{rect(0), rect(1), rect(2), s};
}

void write_progress_plot(const MetricsTable& table, const PlotFiles& out, const std::string& title) {
  for (const bool svg : {false, true}) {
    const auto& path = svg ? out.svg : out.png;
    if (!path.empty())
      write_file_atomic(path, render(table, title, kProgressPlotWidth, kProgressPlotHeight, svg, path.string()));
  }
}

std::string render_progress_png(const MetricsTable& table, const std::string& title, int width, int height) {
  return render(table, title, width, height, /*svg=*/false, "progress plot");
}

std::string encode_png(const uint8_t* pixels, int height, int width, int channels) {
  if (!pixels || height < 1 || width < 1 || (channels != 1 && channels != 3)) {
    throw std::invalid_argument(fmt::format("encode_png: {}x{}x{} image{}: expected a size >= 1 and 1 or 3 channels",
                                            height, width, channels, pixels ? "" : " without pixels"));
  }
  // Cairo writes A8 as an 8-bit gray PNG, RGB24 (a native-endian uint32 0x00RRGGBB per pixel) as RGB.
  SurfacePtr surface(cairo_image_surface_create(channels == 1 ? CAIRO_FORMAT_A8 : CAIRO_FORMAT_RGB24, width, height),
                     cairo_surface_destroy);
  check_cairo(cairo_surface_status(surface.get()), "encode_png");
  cairo_surface_flush(surface.get());
  for (int y = 0; y < height; ++y) {
    unsigned char* row = cairo_image_surface_get_data(surface.get()) +
                         static_cast<size_t>(y) * cairo_image_surface_get_stride(surface.get());
    const uint8_t* p = pixels + static_cast<size_t>(y) * width * channels;
    if (channels == 1) std::copy(p, p + width, row);
    for (int x = 0; channels == 3 && x < width; ++x, p += 3) {
      reinterpret_cast<uint32_t*>(row)[x] = (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
    }
  }
  cairo_surface_mark_dirty(surface.get());
  std::string png;
  check_cairo(cairo_surface_write_to_png_stream(surface.get(), append_bytes, &png), "encode_png");
  return png;
}

}  // namespace u3d
