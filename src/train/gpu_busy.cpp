#include "u3d/train/gpu_busy.h"

#include <ATen/cuda/CUDAEvent.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace u3d {

struct GpuBusyClock::Impl {
  struct Pair {
    at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
  };
  std::vector<std::unique_ptr<Pair>> pairs;  // the pool; [0, used) recorded this epoch
  size_t used = 0;
  size_t summed = 0;  // [0, summed) added to busy_ms
  double busy_ms = 0;
  bool open = false;  // begin_step() without its end_step()

  // Adds the completed pairs (all of them with `wait`).
  void collect(bool wait) {
    if (wait && summed < used) pairs[used - 1]->end.synchronize();
    while (summed < used && pairs[summed]->end.query()) {
      busy_ms += pairs[summed]->begin.elapsed_time(pairs[summed]->end);
      ++summed;
    }
  }
};

GpuBusyClock::GpuBusyClock(const torch::Device& device) {
  if (device.is_cuda()) impl_ = std::make_unique<Impl>();
}

GpuBusyClock::~GpuBusyClock() = default;

void GpuBusyClock::start_epoch() {
  if (!impl_) return;
  impl_->used = impl_->summed = 0;
  impl_->busy_ms = 0;
  impl_->open = false;
}

void GpuBusyClock::begin_step() {
  if (!impl_) return;
  if (impl_->used == impl_->pairs.size()) impl_->pairs.push_back(std::make_unique<Impl::Pair>());
  impl_->pairs[impl_->used]->begin.record();
  impl_->open = true;
}

void GpuBusyClock::end_step() {
  if (!impl_ || !impl_->open) return;
  impl_->pairs[impl_->used]->end.record();
  ++impl_->used;
  impl_->open = false;
}

double GpuBusyClock::epoch_seconds() {
  if (!impl_) return std::numeric_limits<double>::quiet_NaN();
  impl_->collect(/*wait=*/true);
  return impl_->busy_ms / 1000.0;
}

double GpuBusyClock::share_so_far() {
  if (!impl_) return std::numeric_limits<double>::quiet_NaN();
  impl_->collect(/*wait=*/false);
  if (impl_->summed == 0) return std::numeric_limits<double>::quiet_NaN();
  const double span_ms = impl_->pairs[0]->begin.elapsed_time(impl_->pairs[impl_->summed - 1]->end);
  return span_ms > 0 ? std::min(1.0, impl_->busy_ms / span_ms) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace u3d
