#include "u3d/predict/predictor.h"

#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/model/autocast.h"

namespace u3d {

std::vector<int64_t> window_starts(int64_t size, int64_t patch, double overlap) {
  if (size <= patch) return {0};
  const int64_t step =
      std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(patch) * (1.0 - overlap))));
  const int64_t n = static_cast<int64_t>(std::ceil(static_cast<double>(size - patch) / static_cast<double>(step))) + 1;
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < n; ++i) {
    // Spread the windows evenly between 0 and size - patch (as nnU-Net does).
    starts.push_back(
        n == 1 ? 0
               : static_cast<int64_t>(std::llround(static_cast<double>(i) * static_cast<double>(size - patch) /
                                                   static_cast<double>(n - 1))));
  }
  return starts;
}

torch::Tensor gaussian_importance_map(const Shape3& patch, double sigma_fraction) {
  torch::Tensor map = torch::ones({1}, torch::kFloat);
  std::vector<torch::Tensor> axes;
  for (int a = 0; a < 3; ++a) {
    const double centre = (static_cast<double>(patch[a]) - 1.0) / 2.0;
    const double sigma = std::max(1e-3, static_cast<double>(patch[a]) * sigma_fraction);
    const auto x = torch::arange(patch[a], torch::kDouble);
    axes.push_back(torch::exp(-0.5 * ((x - centre) / sigma).square()));
  }
  auto g = axes[0].view({-1, 1, 1}) * axes[1].view({1, -1, 1}) * axes[2].view({1, 1, -1});
  g = g / g.max();
  const double floor = g.masked_select(g > 0).min().item<double>();
  return g.clamp_min(std::max(floor, 1e-6)).to(torch::kFloat);
}

SlidingWindowOptions window_options(const Config& cfg, const Shape3& patch, const torch::Device& device,
                                    bool channels_last, bool mirror) {
  return SlidingWindowOptions{patch,
                              cfg.predict.overlap,
                              cfg.predict.batch_size > 0 ? cfg.predict.batch_size : cfg.data.batch_size,
                              cfg.predict.gaussian,
                              mirror,
                              /*autocast=*/inference_autocast(cfg, device),
                              channels_last,
                              /*stop=*/{},
                              /*sigmoid=*/cfg.model.head == Head::kSigmoid};
}

std::vector<std::vector<int64_t>> mirror_combinations(const Shape3& window) {
  std::vector<std::vector<int64_t>> out;
  for (int mask = 0; mask < 8; ++mask) {
    std::vector<int64_t> dims;
    bool useful = true;
    for (int a = 0; a < 3; ++a) {
      if (!(mask & (1 << a))) continue;
      dims.push_back(2 + a);
      useful = useful && window[static_cast<size_t>(a)] > 1;  // mirroring a 1-voxel axis repeats another
    }
    if (useful) out.push_back(dims);
  }
  return out;
}

void sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& o,
                            const torch::Device& device, SlabSink& sink) {
  torch::NoGradGuard no_grad;
  const bool was_training = net.is_training();
  net.eval();
  // Channel by channel: each channel's block is contiguous (a cache arena's view, data/cache.h, has
  // its channels apart), so copies from page-locked memory (the validation cache on CUDA) stay
  // asynchronous; a pageable image is staged.
  torch::Tensor x = image;
  if (x.device() != device || x.scalar_type() != torch::kFloat) {
    x = torch::empty(image.sizes(), torch::TensorOptions().dtype(torch::kFloat).device(device));
    for (int64_t c = 0; c < image.size(0); ++c) x[c].copy_(image[c], /*non_blocking=*/true);
  }
  // Pad axes smaller than the patch (at the end, with 0 = the mean of a z-scored channel).
  const Shape3 shape = {x.size(1), x.size(2), x.size(3)};
  const Shape3 padded = {std::max(shape[0], o.patch[0]), std::max(shape[1], o.patch[1]),
                         std::max(shape[2], o.patch[2])};
  if (padded != shape) {
    x = torch::constant_pad_nd(x, {0, padded[2] - shape[2], 0, padded[1] - shape[1], 0, padded[0] - shape[0]}, 0.0);
  }
  const auto zs = window_starts(padded[0], o.patch[0], o.overlap);
  const auto ys = window_starts(padded[1], o.patch[1], o.overlap);
  const auto xs = window_starts(padded[2], o.patch[2], o.overlap);
  std::vector<Shape3> origins;  // D-major: every window of a D start before the next start's
  for (auto z : zs)
    for (auto y : ys)
      for (auto w : xs) origins.push_back({z, y, w});

  const torch::Tensor weight =
      (o.gaussian ? gaussian_importance_map(o.patch) : torch::ones({o.patch[0], o.patch[1], o.patch[2]}))
          .to(device, /*non_blocking=*/true);  // (d, h, w)
  // Batches of windows. When a D start has at least a batch of windows, batches do not cross to
  // the next D start, so the rolling buffer needs only a patch depth of rows.
  const size_t bs = static_cast<size_t>(std::max<int64_t>(1, o.batch_size));
  const bool split_rows = ys.size() * xs.size() >= bs;
  std::vector<std::pair<size_t, size_t>> batches;  // [first, last) into origins
  for (size_t first = 0; first < origins.size();) {
    size_t last = first + 1;
    while (last < origins.size() && last - first < bs && !(split_rows && origins[last][0] != origins[first][0])) ++last;
    batches.emplace_back(first, last);
    first = last;
  }
  // Rolling buffer rows: a batch starts where the previous one's rows were handed out (its first
  // window's D start) and reaches its last window's start + patch depth.
  int64_t extent = 0;
  for (const auto& [first, last] : batches) {
    extent = std::max(extent, origins[last - 1][0] + o.patch[0] - origins[first][0]);
  }
  torch::Tensor sum;  // (K, extent, H', W'): weighted outputs of rows [base, base + extent)
  torch::Tensor norm = torch::zeros({extent, padded[1], padded[2]}, torch::TensorOptions().device(device));
  int64_t base = 0;
  for (const auto& [first, last] : batches) {
    if (o.stop && o.stop()) {
      throw StoppedError("sliding-window prediction: stopped by a signal", std::max(StopSignals::pending(), 0));
    }
    std::vector<torch::Tensor> windows;
    for (size_t i = first; i < last; ++i) {
      const auto& p = origins[i];
      windows.push_back(
          x.slice(1, p[0], p[0] + o.patch[0]).slice(2, p[1], p[1] + o.patch[1]).slice(3, p[2], p[2] + o.patch[2]));
    }
    torch::Tensor batch = torch::stack(windows);  // (n, C, d, h, w)
    if (o.channels_last) batch = batch.contiguous(at::MemoryFormat::ChannelsLast3d);
    std::optional<AutocastGuard> autocast;  // the forward passes only; outputs cast to float32 below
    if (o.autocast) autocast.emplace(device.type(), *o.autocast);
    torch::Tensor out;  // (n, K, d, h, w)
    if (o.mirror) {
      // All 8 mirrorings of the n windows in one forward pass: (8 n, C, d, h, w); 4 for slices.
      const auto sets = mirror_combinations(o.patch);
      std::vector<torch::Tensor> inputs;
      for (const auto& dims : sets) inputs.push_back(dims.empty() ? batch : torch::flip(batch, dims));
      torch::Tensor all = net.forward(torch::cat(inputs)).to(torch::kFloat);
      if (o.sigmoid) all = torch::sigmoid(all);  // probabilities averaged
      const int64_t n = batch.size(0);
      for (size_t m = 0; m < sets.size(); ++m) {
        torch::Tensor part = all.narrow(0, static_cast<int64_t>(m) * n, n);
        if (!sets[m].empty()) part = torch::flip(part, sets[m]);
        out = out.defined() ? out + part : part;
      }
      out = out / static_cast<double>(sets.size());
    } else {
      out = net.forward(batch).to(torch::kFloat);
      if (o.sigmoid) out = torch::sigmoid(out);
    }
    autocast.reset();
    if (!sum.defined()) sum = torch::zeros({out.size(1), extent, padded[1], padded[2]}, out.options());
    for (size_t i = first; i < last; ++i) {
      const auto& p = origins[i];
      const int64_t z = p[0] - base;
      sum.slice(1, z, z + o.patch[0])
          .slice(2, p[1], p[1] + o.patch[1])
          .slice(3, p[2], p[2] + o.patch[2])
          .add_(out[static_cast<int64_t>(i - first)] * weight);
      norm.slice(0, z, z + o.patch[0]).slice(1, p[1], p[1] + o.patch[1]).slice(2, p[2], p[2] + o.patch[2]).add_(weight);
    }
    // Rows before the next window's D start are final: normalise, hand out, shift the buffer.
    const int64_t next = last < origins.size() ? origins[last][0] : padded[0];
    const int64_t done = next - base;
    if (done <= 0) continue;
    const int64_t emit = std::min(next, shape[0]) - base;
    if (emit > 0) {
      torch::Tensor rows = sum.narrow(1, 0, emit).narrow(2, 0, shape[1]).narrow(3, 0, shape[2]) /
                           norm.narrow(0, 0, emit).narrow(1, 0, shape[1]).narrow(2, 0, shape[2]);
      if (o.sigmoid) rows = torch::logit(rows, /*eps=*/1e-6);  // the blended probabilities as logits
      sink.consume(base, rows);
    }
    const int64_t keep = extent - std::min(done, extent);
    for (int64_t r = 0; r < keep; ++r) {  // row by row: source and destination never overlap
      sum.select(1, r).copy_(sum.select(1, r + done));
      norm.select(0, r).copy_(norm.select(0, r + done));
    }
    sum.narrow(1, keep, extent - keep).zero_();
    norm.narrow(0, keep, extent - keep).zero_();
    base = next;
  }
  net.train(was_training);
}

namespace {
// Collects the slabs of a whole volume.
class ConcatSink : public SlabSink {
 public:
  void consume(int64_t, const torch::Tensor& slab) override { slabs.push_back(slab); }
  std::vector<torch::Tensor> slabs;
};
}  // namespace

torch::Tensor sliding_window_predict(NetworkImpl& net, const torch::Tensor& image, const SlidingWindowOptions& o,
                                     const torch::Device& device) {
  ConcatSink sink;
  sliding_window_predict(net, image, o, device, sink);
  return torch::cat(sink.slabs, /*dim=*/1);
}

torch::Tensor finalize_prediction(const torch::Tensor& network_output, const Preprocessor& pre) {
  if (pre.task() == Task::kSegmentation) return network_output.argmax(0).to(torch::kUInt8);
  return pre.restore_target(network_output[0]).to(torch::kFloat);
}

}  // namespace u3d
