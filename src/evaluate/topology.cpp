// Connected components, Euler characteristic, Betti numbers and the topology score of binary
// masks (definitions in include/u3d/evaluate/surface_metrics.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>
#include <vector>

#include "surface_metrics_detail.h"
#include "u3d/core/errors.h"
#include "u3d/evaluate/surface_metrics.h"

namespace u3d {
namespace {

using surface_metrics_detail::binary_mask;

// Roots always have the smallest index of their set, so every parent index is below its child's.
int32_t find_root(int32_t* parent, int32_t x) {
  while (parent[x] != x) {
    parent[x] = parent[parent[x]];  // path halving
    x = parent[x];
  }
  return x;
}

void unite(int32_t* parent, int32_t a, int32_t b) {
  a = find_root(parent, a);
  b = find_root(parent, b);
  if (a < b) {
    parent[b] = a;
  } else if (b < a) {
    parent[a] = b;
  }
}

struct Offset {
  int64_t dz, dy, dx;
};

// The neighbours that come before a voxel in raster order (13 for 26-connectivity, 3 for 6).
std::vector<Offset> backward_neighbours(int connectivity) {
  std::vector<Offset> out;
  for (int64_t dz = -1; dz <= 0; ++dz) {
    for (int64_t dy = -1; dy <= 1; ++dy) {
      for (int64_t dx = -1; dx <= 1; ++dx) {
        const bool before = dz < 0 || (dz == 0 && (dy < 0 || (dy == 0 && dx < 0)));
        const int64_t order = std::abs(dz) + std::abs(dy) + std::abs(dx);
        if (before && (connectivity == 26 || order == 1)) out.push_back({dz, dy, dx});
      }
    }
  }
  return out;
}

// Labels a contiguous uint8 {0, 1} mask; the label volume doubles as the union-find parent array.
ComponentLabels label_mask(const torch::Tensor& m, int connectivity) {
  const int64_t d = m.size(0), h = m.size(1), w = m.size(2), n = m.numel();
  if (n >= int64_t{1} << 31) {
    throw DataError(fmt::format("label_components: a volume of {} voxels is over the int32 label limit", n));
  }
  auto labels = torch::zeros({d, h, w}, torch::kInt32);
  const uint8_t* v = m.data_ptr<uint8_t>();
  int32_t* p = labels.data_ptr<int32_t>();
  const auto offsets = backward_neighbours(connectivity);
  for (int64_t z = 0; z < d; ++z) {
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const int64_t i = (z * h + y) * w + x;
        if (!v[i]) continue;
        p[i] = static_cast<int32_t>(i);
        for (const auto& o : offsets) {
          const int64_t zz = z + o.dz, yy = y + o.dy, xx = x + o.dx;
          if (zz < 0 || yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
          const int64_t j = (zz * h + yy) * w + xx;
          if (v[j]) unite(p, static_cast<int32_t>(i), static_cast<int32_t>(j));
        }
      }
    }
  }
  // Parents precede children, so a parent already holds its final label when a child is reached.
  int32_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!v[i]) continue;
    const int32_t q = p[i];
    p[i] = q == static_cast<int32_t>(i) ? ++count : p[q];
  }
  return {labels, count};
}

// The mask cropped to the bounding box of its foreground (contiguous); undefined when empty.
// Betti numbers and the Euler characteristic do not change under this crop.
torch::Tensor crop_to_foreground(const torch::Tensor& m) {
  std::array<int64_t, 3> lo{}, hi{};
  for (int64_t axis = 0; axis < 3; ++axis) {
    std::vector<int64_t> others;
    for (int64_t a = 0; a < 3; ++a) {
      if (a != axis) others.push_back(a);
    }
    const auto any = m.amax(others).nonzero();
    if (any.numel() == 0) return {};
    lo[axis] = any.min().item<int64_t>();
    hi[axis] = any.max().item<int64_t>() + 1;
  }
  return m.slice(0, lo[0], hi[0]).slice(1, lo[1], hi[1]).slice(2, lo[2], hi[2]).contiguous();
}

int64_t euler_of_mask(const torch::Tensor& m, DigitalTopology topology) {
  const auto padded = torch::constant_pad_nd(m, {1, 1, 1, 1, 1, 1}, 0).contiguous();
  const int64_t d = m.size(0), h = m.size(1), w = m.size(2);
  const int64_t ph = h + 2, pw = w + 2;
  const uint8_t* p = padded.data_ptr<uint8_t>();
  int64_t chi = 0;
  // Every 2x2x2 window g of the padded volume, corner (z, y, x) in padded coordinates.
  for (int64_t z = 0; z <= d; ++z) {
    for (int64_t y = 0; y <= h; ++y) {
      for (int64_t x = 0; x <= w; ++x) {
        const uint8_t* c = p + (z * ph + y) * pw + x;
        const int g000 = c[0], g001 = c[1], g010 = c[pw], g011 = c[pw + 1];
        const int g100 = c[ph * pw], g101 = c[ph * pw + 1], g110 = c[ph * pw + pw], g111 = c[ph * pw + pw + 1];
        if (topology == DigitalTopology::kFg26) {
          // Closed unit cubes: the lattice point at the window's centre and the cells leaving it
          // in +x, +y, +z direction exist when any voxel they touch is foreground.
          const int vertex = g000 | g001 | g010 | g011 | g100 | g101 | g110 | g111;
          const int edges = (g001 | g011 | g101 | g111) + (g010 | g011 | g110 | g111) + (g100 | g101 | g110 | g111);
          const int faces = (g011 | g111) + (g101 | g111) + (g110 | g111);
          chi += vertex - edges + faces - g111;
        } else {
          // Voxels as vertices: a cell exists when all its corner voxels are foreground.
          const int edges = (g000 & g001) + (g000 & g010) + (g000 & g100);
          const int faces = (g000 & g001 & g010 & g011) + (g000 & g001 & g100 & g101) + (g000 & g010 & g100 & g110);
          const int cube = g000 & g001 & g010 & g011 & g100 & g101 & g110 & g111;
          chi += g000 - edges + faces - cube;
        }
      }
    }
  }
  return chi;
}

std::array<int64_t, 3> betti_of_mask(const torch::Tensor& mask, DigitalTopology topology) {
  const auto m = crop_to_foreground(mask);
  if (!m.defined()) return {0, 0, 0};
  const bool fg26 = topology == DigitalTopology::kFg26;
  const int64_t b0 = label_mask(m, fg26 ? 26 : 6).count;
  const auto outside = (1 - torch::constant_pad_nd(m, {1, 1, 1, 1, 1, 1}, 0)).contiguous();
  const int64_t b2 = label_mask(outside, fg26 ? 6 : 26).count - 1;
  return {b0, b0 + b2 - euler_of_mask(m, topology), b2};
}

// [0, n) cut into `parts` chunks whose sizes differ by at most 1, the larger first.
std::vector<std::pair<int64_t, int64_t>> axis_cuts(int64_t n, int64_t parts) {
  parts = std::max<int64_t>(1, std::min(parts, std::max<int64_t>(n, 1)));
  std::vector<std::pair<int64_t, int64_t>> cuts;
  int64_t start = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t size = n / parts + (i < n % parts ? 1 : 0);
    cuts.emplace_back(start, start + size);
    start += size;
  }
  return cuts;
}

}  // namespace

ComponentLabels label_components(const torch::Tensor& mask, int connectivity) {
  if (connectivity != 6 && connectivity != 26) {
    throw DataError(fmt::format("label_components: connectivity {} is not supported, expected 6 or 26", connectivity));
  }
  return label_mask(binary_mask(mask, "label_components mask"), connectivity);
}

int64_t euler_characteristic(const torch::Tensor& mask, DigitalTopology topology) {
  const auto m = crop_to_foreground(binary_mask(mask, "euler_characteristic mask"));
  return m.defined() ? euler_of_mask(m, topology) : 0;
}

std::array<int64_t, 3> betti_numbers(const torch::Tensor& mask, DigitalTopology topology) {
  return betti_of_mask(binary_mask(mask, "betti_numbers mask"), topology);
}

TopologyCounts topology_counts(const torch::Tensor& pred, const torch::Tensor& ref, int64_t tiles_per_axis) {
  const auto p = binary_mask(pred, "topology_counts prediction");
  const auto r = binary_mask(ref, "topology_counts reference");
  if (p.sizes() != r.sizes()) {
    throw DataError(fmt::format("topology_counts: prediction shape {} differs from reference shape {}",
                                fmt::join(p.sizes(), "x"), fmt::join(r.sizes(), "x")));
  }
  if (tiles_per_axis < 1) {
    throw DataError(fmt::format("topology_counts: tiles_per_axis is {}, expected >= 1", tiles_per_axis));
  }
  TopologyCounts counts;
  for (const auto& [z0, z1] : axis_cuts(p.size(0), tiles_per_axis)) {
    for (const auto& [y0, y1] : axis_cuts(p.size(1), tiles_per_axis)) {
      for (const auto& [x0, x1] : axis_cuts(p.size(2), tiles_per_axis)) {
        if (z1 <= z0 || y1 <= y0 || x1 <= x0) continue;
        auto tile = [&](const torch::Tensor& t) {
          return t.slice(0, z0, z1).slice(1, y0, y1).slice(2, x0, x1).contiguous();
        };
        const auto bp = betti_of_mask(tile(p), DigitalTopology::kFg6);
        const auto br = betti_of_mask(tile(r), DigitalTopology::kFg6);
        for (size_t k = 0; k < 3; ++k) {
          counts.pred[k] += bp[k];
          counts.ref[k] += br[k];
          counts.matched[k] += std::min(bp[k], br[k]);
        }
      }
    }
  }
  return counts;
}

double topo_score(const TopologyCounts& counts) {
  constexpr std::array<double, 3> kWeights{0.34, 0.33, 0.33};
  double weighted = 0.0, weight_sum = 0.0;
  for (size_t k = 0; k < 3; ++k) {
    const int64_t p = counts.pred[k], g = counts.ref[k];
    if (p + g == 0) continue;  // inactive dimension
    const double f1 = g != 0 ? 2.0 * static_cast<double>(counts.matched[k]) / static_cast<double>(p + g)
                             : 0.5 / (static_cast<double>(p) + 0.5);
    weighted += kWeights[k] * f1;
    weight_sum += kWeights[k];
  }
  return weight_sum > 0.0 ? weighted / weight_sum : 1.0;
}

}  // namespace u3d
