// Contours rasterised and dose resampled onto an image grid (io/dicom/dicom_grid.h).
#include "u3d/io/dicom/dicom_grid.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "u3d/core/parallel.h"

namespace u3d {
namespace {

Vec3 minus(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }

struct Point2 {
  double i, j;  // column, row (fractional voxel indices)
};

// Marks the voxel centres that lie on the segment a-b (within 1e-3 voxel).
void mark_edge(const Point2& a, const Point2& b, int64_t rows, int64_t cols, uint8_t* plane) {
  const int64_t steps =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::max(std::abs(b.i - a.i), std::abs(b.j - a.j)))) * 4);
  for (int64_t s = 0; s <= steps; ++s) {
    const double t = static_cast<double>(s) / static_cast<double>(steps);
    const double i = a.i + t * (b.i - a.i), j = a.j + t * (b.j - a.j);
    const double ri = std::round(i), rj = std::round(j);
    if (std::abs(i - ri) > 1e-3 || std::abs(j - rj) > 1e-3) continue;
    if (ri < 0 || rj < 0 || ri >= static_cast<double>(cols) || rj >= static_cast<double>(rows)) continue;
    plane[static_cast<int64_t>(rj) * cols + static_cast<int64_t>(ri)] = 1;
  }
}

// Even-odd fill of the polygons of one slice at the voxel centres, edges included.
void fill_slice(const std::vector<std::vector<Point2>>& polys, int64_t rows, int64_t cols, uint8_t* plane) {
  std::vector<double> xs;
  for (int64_t j = 0; j < rows; ++j) {
    const double y = static_cast<double>(j);
    xs.clear();
    for (const auto& poly : polys) {
      for (size_t p = 0; p < poly.size(); ++p) {
        const Point2& a = poly[p];
        const Point2& b = poly[(p + 1) % poly.size()];
        if ((a.j <= y && y < b.j) || (b.j <= y && y < a.j)) xs.push_back(a.i + (y - a.j) / (b.j - a.j) * (b.i - a.i));
      }
    }
    std::sort(xs.begin(), xs.end());
    for (size_t q = 0; q + 1 < xs.size(); q += 2) {
      const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(xs[q] - 1e-6)));
      const int64_t hi = std::min<int64_t>(cols - 1, static_cast<int64_t>(std::floor(xs[q + 1] + 1e-6)));
      for (int64_t i = lo; i <= hi; ++i) plane[j * cols + i] ^= 1;
    }
  }
  for (const auto& poly : polys) {
    for (size_t p = 0; p < poly.size(); ++p) mark_edge(poly[p], poly[(p + 1) % poly.size()], rows, cols, plane);
  }
}

}  // namespace

torch::Tensor rasterize_structure(const RtStructure& s, const DicomGrid& grid, int64_t* off_grid) {
  const auto [depth, rows, cols] = grid.shape;
  std::map<int64_t, std::vector<std::vector<Point2>>> by_slice;
  int64_t off = 0;
  for (const auto& contour : s.contours) {
    std::vector<Point2> poly;
    double kmin = 1e300, kmax = -1e300;
    for (const Vec3& p : contour) {
      const Vec3 d = minus(p, grid.origin);
      const double k = dot(d, grid.normal) / grid.spacing[0];
      kmin = std::min(kmin, k), kmax = std::max(kmax, k);
      poly.push_back({dot(d, grid.row_dir) / grid.spacing[2], dot(d, grid.col_dir) / grid.spacing[1]});
    }
    const double k = std::round((kmin + kmax) / 2);
    if (kmax - kmin > 0.5 || std::abs((kmin + kmax) / 2 - k) > 0.5 || k < 0 || k >= static_cast<double>(depth)) {
      ++off;
      continue;
    }
    by_slice[static_cast<int64_t>(k)].push_back(std::move(poly));
  }
  if (off_grid) *off_grid = off;
  torch::Tensor mask = torch::zeros({depth, rows, cols}, torch::kUInt8);
  uint8_t* m = mask.data_ptr<uint8_t>();
  for (const auto& [k, polys] : by_slice) fill_slice(polys, rows, cols, m + k * rows * cols);
  return mask;
}

torch::Tensor resample_dose(const RtDose& dose, const DicomGrid& grid, int64_t* outside) {
  const auto [depth, rows, cols] = grid.shape;
  const int64_t frames = dose.gy.size(0), drows = dose.gy.size(1), dcols = dose.gy.size(2);
  const torch::Tensor src = dose.gy.contiguous();
  const float* g = src.data_ptr<float>();
  torch::Tensor out = torch::zeros({depth, rows, cols}, torch::kFloat32);
  float* o = out.data_ptr<float>();
  const auto& offs = dose.frame_offsets;
  std::vector<int64_t> missed(static_cast<size_t>(depth), 0);
  parallel_for(depth, resolve_threads(0), [&](int64_t k) {
    for (int64_t j = 0; j < rows; ++j) {
      for (int64_t i = 0; i < cols; ++i) {
        const Vec3 d =
            minus(grid.world(static_cast<double>(k), static_cast<double>(j), static_cast<double>(i)), dose.origin);
        const double u = dot(d, dose.row_dir) / dose.pixel_spacing[1];  // column
        const double v = dot(d, dose.col_dir) / dose.pixel_spacing[0];  // row
        const double w = dot(d, dose.normal);                           // mm along the normal
        const double eps = 1e-6;
        if (u < -eps || v < -eps || u > static_cast<double>(dcols - 1) + eps ||
            v > static_cast<double>(drows - 1) + eps || w < offs.front() - 1e-3 || w > offs.back() + 1e-3) {
          ++missed[static_cast<size_t>(k)];
          continue;
        }
        // Frame interval by the offsets (any spacing).
        int64_t f0 = 0;
        double tf = 0;
        if (frames > 1) {
          const auto it = std::upper_bound(offs.begin(), offs.end(), w);
          f0 = std::clamp<int64_t>(static_cast<int64_t>(it - offs.begin()) - 1, 0, frames - 2);
          tf = std::clamp(
              (w - offs[static_cast<size_t>(f0)]) / (offs[static_cast<size_t>(f0 + 1)] - offs[static_cast<size_t>(f0)]),
              0.0, 1.0);
        }
        const int64_t c0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(u)), 0, std::max<int64_t>(0, dcols - 2));
        const int64_t r0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(v)), 0, std::max<int64_t>(0, drows - 2));
        const double tc = dcols > 1 ? std::clamp(u - static_cast<double>(c0), 0.0, 1.0) : 0.0;
        const double tr = drows > 1 ? std::clamp(v - static_cast<double>(r0), 0.0, 1.0) : 0.0;
        const int64_t f1 = std::min(f0 + 1, frames - 1), r1 = std::min(r0 + 1, drows - 1);
        const int64_t c1 = std::min(c0 + 1, dcols - 1);
        const auto at = [&](int64_t f, int64_t r, int64_t c) {
          return static_cast<double>(g[(f * drows + r) * dcols + c]);
        };
        const auto plane = [&](int64_t f) {
          const double top = at(f, r0, c0) * (1 - tc) + at(f, r0, c1) * tc;
          const double bottom = at(f, r1, c0) * (1 - tc) + at(f, r1, c1) * tc;
          return top * (1 - tr) + bottom * tr;
        };
        o[(k * rows + j) * cols + i] = static_cast<float>(plane(f0) * (1 - tf) + plane(f1) * tf);
      }
    }
  });
  if (outside) {
    *outside = 0;
    for (const int64_t m : missed) *outside += m;
  }
  return out;
}

}  // namespace u3d
