#include "u3d/io/dicom/mask_contours.h"

#include <cmath>
#include <cstdint>
#include <unordered_map>

namespace u3d {
namespace {

// A crossing point on the doubled grid of the mask padded by one pixel: (2 r + 1, 2 c) lies between
// pixels (r, c) and (r + 1, c), (2 r, 2 c + 1) between (r, c) and (r, c + 1).
int64_t key(int64_t y2, int64_t x2, int64_t width2) { return y2 * width2 + x2; }

}  // namespace

std::vector<Polygon2d> mask_contours(const torch::Tensor& mask, double inset) {
  const torch::Tensor padded = torch::constant_pad_nd(mask.ne(0).to(torch::kUInt8), {1, 1, 1, 1}).contiguous();
  const int64_t h = padded.size(0), w = padded.size(1), w2 = 2 * w + 1;
  const auto in = padded.accessor<uint8_t, 2>();
  // Each crossing point joins exactly two segments: its two neighbours along the outline.
  std::unordered_map<int64_t, std::array<int64_t, 2>> next;
  const auto link = [&](int64_t a, int64_t b) {
    for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      auto [it, added] = next.try_emplace(from, std::array<int64_t, 2>{-1, -1});
      it->second[it->second[0] < 0 ? 0 : 1] = to;
    }
  };
  for (int64_t r = 0; r + 1 < h; ++r) {
    for (int64_t c = 0; c + 1 < w; ++c) {
      const bool tl = in[r][c], tr = in[r][c + 1], br = in[r + 1][c + 1], bl = in[r + 1][c];
      const int64_t top = key(2 * r, 2 * c + 1, w2), right = key(2 * r + 1, 2 * c + 2, w2);
      const int64_t bottom = key(2 * r + 2, 2 * c + 1, w2), left = key(2 * r + 1, 2 * c, w2);
      std::vector<int64_t> cut;  // the crossed edges, in order around the cell
      if (tl != tr) cut.push_back(top);
      if (tr != br) cut.push_back(right);
      if (br != bl) cut.push_back(bottom);
      if (bl != tl) cut.push_back(left);
      if (cut.size() == 2) {
        link(cut[0], cut[1]);
      } else if (cut.size() == 4) {  // a saddle: cut off each inside corner on its own
        if (tl) {
          link(top, left);
          link(bottom, right);
        } else {
          link(top, right);
          link(bottom, left);
        }
      }
    }
  }
  std::vector<Polygon2d> loops;
  std::unordered_map<int64_t, bool> seen;
  for (const auto& [start, ends] : next) {
    if (seen[start]) continue;
    Polygon2d loop;
    int64_t prev = -1, at = start;
    while (!seen[at]) {
      seen[at] = true;
      const int64_t y2 = at / w2, x2 = at % w2;
      loop.push_back({y2 / 2.0 - 1.0, x2 / 2.0 - 1.0});  // back to the unpadded pixel coordinates
      const auto& n = next.at(at);
      const int64_t to = n[0] != prev ? n[0] : n[1];
      prev = at;
      at = to;
    }
    // Drop points on a straight run (collinear with both neighbours).
    Polygon2d kept;
    const size_t n = loop.size();
    for (size_t i = 0; i < n; ++i) {
      const auto& a = loop[(i + n - 1) % n];
      const auto& b = loop[i];
      const auto& c = loop[(i + 1) % n];
      const double cross = (b[0] - a[0]) * (c[1] - b[1]) - (b[1] - a[1]) * (c[0] - b[0]);
      if (cross != 0) kept.push_back(b);
    }
    if (kept.size() < 3) kept = loop;
    // Each vertex towards its inside pixel (collinear runs stay collinear: all their points move
    // onto the same parallel line).
    for (auto& [row, col] : kept) {
      const int64_t y2 = static_cast<int64_t>(std::lround(2 * (row + 1))),
                    x2 = static_cast<int64_t>(std::lround(2 * (col + 1)));
      if (y2 % 2 == 1) {  // between rows (y2 - 1) / 2 and (y2 + 1) / 2 of the padded mask
        row += in[(y2 + 1) / 2][x2 / 2] ? inset : -inset;
      } else {  // between columns (x2 - 1) / 2 and (x2 + 1) / 2
        col += in[y2 / 2][(x2 + 1) / 2] ? inset : -inset;
      }
    }
    loops.push_back(kept);
  }
  return loops;
}

}  // namespace u3d
