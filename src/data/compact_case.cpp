#include "compact_case.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "u3d/core/errors.h"
#include "u3d/core/input_limits.h"

namespace u3d::cache_detail {

Compact compact_kind(const torch::Tensor& x) {  // float32, contiguous
  const float* p = x.data_ptr<float>();
  const int64_t n = x.numel();
  float lo = 0, hi = 0;
  bool integral = true;
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    integral = integral && v == std::nearbyint(v);
    lo = i == 0 ? v : std::min(lo, v);
    hi = i == 0 ? v : std::max(hi, v);
  }
  if (!integral) return kCompactFloat;
  if (lo >= 0 && hi <= 255) return kCompactUInt8;
  if (lo >= -32768 && hi <= 32767) return kCompactInt16;
  return kCompactFloat;
}

torch::ScalarType compact_dtype(int kind, bool float16) {
  switch (kind) {
    case kCompactUInt8: return torch::kUInt8;
    case kCompactInt16: return torch::kInt16;
    default: return float16 ? torch::kHalf : torch::kFloat;
  }
}

std::string dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kUInt8: return "uint8";
    case torch::kInt16: return "int16";
    case torch::kHalf: return "float16";
    case torch::kFloat: return "float32";
    default: return c10::toString(t);
  }
}

CaseSource source_or_reader(const DatasetReader& reader, const CaseSource& read) {
  if (read) return read;
  return [&reader](const std::string& id) { return reader.read_case(id); };
}

CompactCase compact_case(const CaseSource& read, const std::string& id, const Preprocessor& pre, bool float16) {
  const auto t0 = std::chrono::steady_clock::now();
  CaseData raw = read(id);
  CompactCase c;
  c.read_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.id = id;
  torch::Tensor x = pre.select_channels(raw.image);  // (C, D, H, W) float32, clamped
  raw.image = torch::Tensor();
  const auto affines = pre.channel_affines(x);
  c.shape = {x.size(1), x.size(2), x.size(3)};
  for (int64_t ch = 0; ch < x.size(0); ++ch) {
    const torch::Tensor v = x[ch].contiguous();
    const int kind = compact_kind(v);
    c.kinds.push_back(kind);
    c.channels.push_back(v.to(compact_dtype(kind, float16)));
    c.sub.push_back(affines[static_cast<size_t>(ch)].sub);
    c.div.push_back(affines[static_cast<size_t>(ch)].div);
  }
  if (raw.target.defined()) {
    c.target = raw.target;  // float32 target units, or uint8 labels
    if (pre.task() == Task::kDose) {
      if (raw.mask.defined()) {
        const auto m = raw.mask.to(torch::kBool);
        c.target_sum = raw.target.masked_select(m).sum(torch::kDouble).item<double>();
        c.target_count = static_cast<double>(m.sum().item<int64_t>());
      } else {
        c.target_sum = raw.target.sum(torch::kDouble).item<double>();
        c.target_count = static_cast<double>(raw.target.numel());
      }
    }
  }
  if (raw.mask.defined()) c.mask = raw.mask.to(torch::kUInt8);
  return c;
}

torch::Tensor pad_centred(const torch::Tensor& t, const Shape3& to, double value) {
  const int64_t n = t.dim();
  std::vector<int64_t> pad;  // constant_pad_nd: last axis first, (before, after) each
  bool any = false;
  for (int a = 2; a >= 0; --a) {
    const int64_t need = std::max<int64_t>(0, to[a] - t.size(n - 3 + a));
    pad.push_back(need / 2);
    pad.push_back(need - need / 2);
    any = any || need > 0;
  }
  return any ? torch::constant_pad_nd(t, pad, value) : t;
}

void pad_case(CompactCase& c, const Shape3& to) {
  if (c.shape[0] >= to[0] && c.shape[1] >= to[1] && c.shape[2] >= to[2]) return;
  for (size_t ch = 0; ch < c.channels.size(); ++ch) {
    double value = c.sub[ch];
    if (c.kinds[ch] != kCompactFloat) {  // the nearest value the channel's integer storage holds
      const double hi = c.kinds[ch] == kCompactUInt8 ? 255 : 32767, lo = c.kinds[ch] == kCompactUInt8 ? 0 : -32768;
      value = std::min(hi, std::max(lo, std::round(value)));
    }
    c.channels[ch] = pad_centred(c.channels[ch], to, value).contiguous();
  }
  if (c.target.defined()) c.target = pad_centred(c.target, to, 0.0).contiguous();
  if (c.mask.defined()) c.mask = pad_centred(c.mask, to, 0.0).contiguous();
  for (int a = 0; a < 3; ++a) c.shape[a] = std::max(c.shape[a], to[a]);
  c.padded = true;
}

void add_label_maps(CompactCase& c, const LabelMapFn& make) {
  if (!make || !c.target.defined() || c.target.scalar_type() != torch::kUInt8) return;
  const auto t0 = std::chrono::steady_clock::now();
  LabelMaps m;
  try {
    m = make(c.target);
  } catch (const std::exception& e) {
    if (host_allocation_failure(e)) throw;  // the cache's loader names it (cache.cpp parallel_items)
    throw DataError(fmt::format("case '{}': ground-truth maps: {}", c.id, error_line(e)));
  }
  if (m.skeleton.defined()) c.skeleton = m.skeleton.to(torch::kUInt8).contiguous();
  if (m.distance.defined()) c.distance = m.distance.to(torch::kHalf).contiguous();
  c.maps_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace u3d::cache_detail
