#include "u3d/data/loader.h"

#include <algorithm>
#include <stdexcept>

#include "batch_sources.h"

namespace u3d {

const RawBatch& BatchSource::next_raw(int64_t, int64_t) {
  throw std::logic_error("BatchLoader::next_raw needs finalize = false and a host cache");
}

std::function<Batch()> BatchSource::capturable(std::string* why) {
  if (why) why->clear();  // host sampling: nothing a graph could capture
  return {};
}

namespace {

LoaderOptions checked(LoaderOptions o) {
  if (o.steps_per_epoch < 1) throw std::invalid_argument("BatchLoader: steps_per_epoch must be >= 1");
  o.workers = std::max<int64_t>(1, o.workers);
  o.prefetch = o.prefetch > 0 ? o.prefetch : 2 * o.workers;
  return o;
}

}  // namespace

BatchLoader::BatchLoader(const PatchSampler& sampler, LoaderOptions options) : finish_(sampler.new_finalizer()) {
  options = checked(std::move(options));
  source_ = sampler.cache().device().is_cuda() ? loader_detail::device_source(sampler, *finish_, options)
                                               : loader_detail::host_source(sampler, *finish_, options);
}

BatchLoader::~BatchLoader() = default;

Batch BatchLoader::next(int64_t epoch, int64_t step) {
  Batch b = source_->next(epoch, step);
  ++handed_;
  return b;
}

const RawBatch& BatchLoader::next_raw(int64_t epoch, int64_t step) {
  const RawBatch& raw = source_->next_raw(epoch, step);
  ++handed_;
  return raw;
}

void BatchLoader::seek(int64_t epoch, int64_t step) { source_->seek(epoch, step); }
std::function<Batch()> BatchLoader::capturable(std::string* why) { return source_->capturable(why); }
void BatchLoader::stop() { source_->stop(); }
double BatchLoader::wait_seconds() const { return source_->wait_seconds(); }
int64_t BatchLoader::batches() const { return handed_; }
std::string BatchLoader::describe() const { return source_->describe(); }

}  // namespace u3d
