// Host sampling for the loader (batch_source.h): sampler threads fill raw batches ahead of the loop
// into a bounded ring of staging slots; CPU training finalizes them in the threads, CUDA training
// copies each to a device ring on a side stream (events order the copy after the slot's previous
// use and the compute after the copy) and finalizes it on the GPU, issuing the next copy before
// returning so copies overlap the step's compute.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "batch_sources.h"
#include "u3d/core/errors.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/run.h"
#include "u3d/data/loader.h"

namespace u3d::loader_detail {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class HostSource final : public BatchSource {
 public:
  // A staging slot: one host raw batch (page-locked for CUDA) and the event of its last copy.
  struct Slot {
    RawBatch raw;
    std::unique_ptr<at::cuda::CUDAEvent> copied;
  };
  // A produced batch, by sequence number k (k = 0 is the start position).
  struct Item {
    int slot = -1;  // staging slot still held, or -1
    Batch batch;    // finished on the CPU (CPU training)
  };
  // A device raw batch of the CUDA path.
  struct DeviceSlot {
    RawBatch raw;
    at::cuda::CUDAEvent ready, consumed;
  };

  const PatchSampler& sampler;
  const BatchFinalizer& finish;  // the loader's
  LoaderOptions options;
  bool cuda = false;  // CUDA training: staging ring, copies on a side stream, finalized on the GPU

  // Production state, guarded by mutex.
  std::mutex mutex;
  std::condition_variable work_cv, ready_cv;
  std::vector<std::thread> threads;
  bool running = false, stopping = false;
  std::exception_ptr error;
  int64_t start_epoch = 0, start_step = 0;
  int64_t claimed = 0;  // next sequence number a worker takes
  int64_t taken = 0;    // items taken out of `ready` by the loop
  int64_t limit = -1;   // sequence numbers < limit exist (epochs bound); -1: no end
  std::map<int64_t, Item> ready;
  std::vector<Slot> slots;
  std::vector<int> free_slots;

  // Loop-side state.
  int64_t expected = 0;  // sequence number next() should be asked for
  int held_slot = -1;    // raw mode: the slot handed out last
  double wait = 0;

  // CUDA path.
  std::optional<c10::cuda::CUDAStream> copy_stream;
  std::vector<std::unique_ptr<DeviceSlot>> device_slots;
  std::map<int64_t, int> issued;  // sequence number -> device slot whose copy is enqueued
  int next_device_slot = 0;

  HostSource(const PatchSampler& s, const BatchFinalizer& f, LoaderOptions o)
      : sampler(s), finish(f), options(std::move(o)) {
    cuda = options.device.is_cuda() && options.finalize;
    const int n_slots = static_cast<int>(options.prefetch) + 2;
    for (int i = 0; i < n_slots; ++i) {
      Slot slot;
      slot.raw = sampler.allocate_raw(/*pinned=*/cuda);
      if (cuda) slot.copied = std::make_unique<at::cuda::CUDAEvent>();
      slots.push_back(std::move(slot));
    }
    if (cuda) {
      c10::cuda::CUDAGuard guard(options.device);
      copy_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, options.device.index());
      for (int i = 0; i < 2; ++i) {
        auto d = std::make_unique<DeviceSlot>();
        d->raw = slots.front().raw.to(options.device);
        // Written on the copy stream, read on the compute stream: keep the allocator from reusing
        // the memory before the copy stream is done with it.
        for (const auto* t : {&d->raw.target, &d->raw.mask, &d->raw.skeleton, &d->raw.distance, &d->raw.plan}) {
          if (t->defined()) c10::cuda::CUDACachingAllocator::recordStream(t->storage().data_ptr(), *copy_stream);
        }
        for (const auto& t : d->raw.images) {
          c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *copy_stream);
        }
        device_slots.push_back(std::move(d));
      }
    }
  }

  ~HostSource() override { stop(); }

  std::pair<int64_t, int64_t> position(int64_t k) const {
    const int64_t s = start_step + k;
    return {start_epoch + s / options.steps_per_epoch, s % options.steps_per_epoch};
  }

  void start(int64_t epoch, int64_t step) {
    stop();
    std::lock_guard<std::mutex> lock(mutex);
    start_epoch = epoch;
    start_step = step;
    claimed = taken = expected = 0;
    limit =
        options.epochs < 0 ? -1 : std::max<int64_t>(0, (options.epochs - epoch + 1) * options.steps_per_epoch - step);
    ready.clear();
    issued.clear();
    free_slots.clear();
    for (int i = static_cast<int>(slots.size()) - 1; i >= 0; --i) free_slots.push_back(i);
    held_slot = -1;
    error = nullptr;
    stopping = false;
    running = true;
    for (int64_t t = 0; t < options.workers; ++t) threads.emplace_back([this] { work(); });
  }

  void stop() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!running) return;
      stopping = true;
    }
    work_cv.notify_all();
    ready_cv.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
    std::lock_guard<std::mutex> lock(mutex);
    running = false;
  }

  void work() {
    use_one_intra_op_thread();
    while (true) {
      int64_t k = 0;
      int slot = -1;
      {
        std::unique_lock<std::mutex> lock(mutex);
        work_cv.wait(lock, [&] {
          return stopping ||
                 ((limit < 0 || claimed < limit) && claimed < taken + options.prefetch && !free_slots.empty());
        });
        if (stopping) return;
        k = claimed++;
        slot = free_slots.back();
        free_slots.pop_back();
      }
      const auto [epoch, step] = position(k);
      Item item;
      item.slot = slot;
      try {
        Slot& s = slots[static_cast<size_t>(slot)];
        if (s.copied) s.copied->synchronize();  // the slot's previous copy to the GPU has finished
        sampler.fill_raw(epoch, step, s.raw);
        if (options.finalize && !cuda) {
          item.batch = finish(s.raw);
          item.slot = -1;
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) {  // an allocation failure goes on as it is: main() names it, never the allocator's text
          error = host_allocation_failure(e)
                      ? std::current_exception()
                      : std::make_exception_ptr(DataError(
                            fmt::format("data loader: batch {} of epoch {}: {}", step, epoch, error_line(e))));
        }
        stopping = true;
        ready_cv.notify_all();
        work_cv.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (item.slot < 0) free_slots.push_back(slot);
        ready.emplace(k, std::move(item));
      }
      ready_cv.notify_all();
      work_cv.notify_all();
    }
  }

  // Takes item k out of the queue; waits (counted) while it is not there. nullopt: !wait and absent.
  std::optional<Item> take(int64_t k, bool wait_for_it) {
    const auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mutex);
    if (limit >= 0 && k >= limit) {
      if (!wait_for_it) return std::nullopt;
      throw std::logic_error(fmt::format("BatchLoader: batch {} of epoch {} is past the last epoch ({})",
                                         position(k).second, position(k).first, options.epochs));
    }
    if (wait_for_it) ready_cv.wait(lock, [&] { return error || ready.count(k) > 0; });
    if (error) std::rethrow_exception(error);
    auto it = ready.find(k);
    if (it == ready.end()) return std::nullopt;
    Item item = std::move(it->second);
    ready.erase(it);
    taken = std::max(taken, k + 1);
    lock.unlock();
    work_cv.notify_all();
    if (wait_for_it) wait += seconds_since(t0);
    return item;
  }

  void release(int slot) {
    if (slot < 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      free_slots.push_back(slot);
    }
    work_cv.notify_all();
  }

  // Continues when (epoch, step) is where production stands; else (re)starts there. A worker's
  // failure is final: every later call rethrows it.
  void seek(int64_t epoch, int64_t step) override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (error) std::rethrow_exception(error);
    }
    if (running && position(expected) == std::make_pair(epoch, step)) return;
    start(epoch, step);
  }

  // CUDA: enqueue the copy of host item k into a device slot on the side stream.
  void issue(int64_t k, const Item& item) {
    const int d = next_device_slot;
    next_device_slot = (next_device_slot + 1) % static_cast<int>(device_slots.size());
    DeviceSlot& dev = *device_slots[static_cast<size_t>(d)];
    Slot& host = slots[static_cast<size_t>(item.slot)];
    {
      c10::cuda::CUDAStreamGuard guard(*copy_stream);
      dev.consumed.block(*copy_stream);  // the previous batch in this slot has been finalized
      host.raw.copy_to(dev.raw, /*non_blocking=*/true);
      dev.ready.record(*copy_stream);
      host.copied->record(*copy_stream);
    }
    release(item.slot);  // a worker waits on host.copied before refilling it
    issued.emplace(k, d);
  }

  Batch next(int64_t epoch, int64_t step) override {
    if (!options.finalize) throw std::logic_error("BatchLoader::next needs finalize = true; use next_raw");
    seek(epoch, step);
    const int64_t k = expected++;
    if (!cuda) {
      Item item = *take(k, /*wait_for_it=*/true);
      return std::move(item.batch);
    }
    if (issued.count(k) == 0) issue(k, *take(k, /*wait_for_it=*/true));
    const int d = issued.at(k);
    issued.erase(k);
    DeviceSlot& dev = *device_slots[static_cast<size_t>(d)];
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(options.device.index());
    dev.ready.block(compute);
    Batch b = finish(dev.raw);
    dev.consumed.record(compute);
    // Start the next copy now, so it runs while this step computes.
    if (issued.size() < device_slots.size() - 1) {
      if (auto nxt = take(k + 1, /*wait_for_it=*/false)) issue(k + 1, *nxt);
    }
    return b;
  }

  const RawBatch& next_raw(int64_t epoch, int64_t step) override {
    if (options.finalize) throw std::logic_error("BatchLoader::next_raw needs finalize = false and a host cache");
    seek(epoch, step);
    release(held_slot);
    held_slot = -1;
    const int64_t k = expected++;
    Item item = *take(k, /*wait_for_it=*/true);
    held_slot = item.slot;
    return slots[static_cast<size_t>(held_slot)].raw;
  }

  double wait_seconds() const override { return wait; }

  std::string describe() const override {
    const auto& o = options;
    std::string s =
        fmt::format("{} sampler thread{}, {} batches ahead", o.workers, o.workers == 1 ? "" : "s", o.prefetch);
    if (cuda) s += fmt::format(", page-locked staging ring, copies to {} on a side stream", o.device.str());
    return s;
  }
};

}  // namespace

std::unique_ptr<BatchSource> host_source(const PatchSampler& sampler, const BatchFinalizer& finish,
                                         const LoaderOptions& options) {
  return std::make_unique<HostSource>(sampler, finish, options);
}

}  // namespace u3d::loader_detail
