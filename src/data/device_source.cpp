// GPU sampling for the loader (batch_source.h): the DeviceSampler over a data.cache: gpu cache,
// finalized by the loader's BatchFinalizer on the device; no threads, next() only enqueues device work.
#include <fmt/format.h>

#include <chrono>

#include "batch_sources.h"
#include "u3d/data/device_sampler.h"
#include "u3d/data/loader.h"

namespace u3d::loader_detail {
namespace {

using Clock = std::chrono::steady_clock;

class DeviceSource final : public BatchSource {
 public:
  DeviceSource(const PatchSampler& sampler, const BatchFinalizer& finish, const LoaderOptions& options)
      : sampler_(sampler, &finish), device_(options.device), steps_per_epoch_(options.steps_per_epoch) {}

  Batch next(int64_t epoch, int64_t step) override {
    const auto t0 = Clock::now();
    if (sampler_.epoch() != epoch) sampler_.set_epoch(epoch, steps_per_epoch_);
    Batch b = sampler_.batch(step);
    b.step = step;
    wait_ += std::chrono::duration<double>(Clock::now() - t0).count();
    return b;
  }

  void seek(int64_t epoch, int64_t step) override { sampler_.seek(epoch, step, steps_per_epoch_); }

  std::function<Batch()> capturable(std::string* why) override {
    if (!sampler_.capturable(why)) return {};
    return [this] { return sampler_.next_batch(); };
  }

  double wait_seconds() const override { return wait_; }

  std::string describe() const override {
    return fmt::format("sampling on {} from the GPU cache (no sampler threads)", device_.str());
  }

 private:
  DeviceSampler sampler_;
  torch::Device device_;
  int64_t steps_per_epoch_;
  double wait_ = 0;
};

}  // namespace

std::unique_ptr<BatchSource> device_source(const PatchSampler& sampler, const BatchFinalizer& finish,
                                           const LoaderOptions& options) {
  return std::make_unique<DeviceSource>(sampler, finish, options);
}

}  // namespace u3d::loader_detail
