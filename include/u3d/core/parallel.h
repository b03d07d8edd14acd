// Host-side parallel work on files (import, preflight, cache loading, evaluation): plain threads,
// no LibTorch pool. The project's only thread pools: parallel_for (independent items) and
// ordered_pipeline (items made in parallel, consumed in order on the calling thread).
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace u3d {

// What parallel_for does when fn throws.
enum class OnError {
  kFinishAll,  // every index runs; the error of the lowest failing index is rethrown (the message
               // does not depend on the thread count or timing)
  kStopEarly,  // no new index starts after the first failure, whose error is rethrown (loading a
               // cache: one bad case ends the run, reading the rest would only waste time)
};

// Runs fn(i) for every i in [0, n) on up to `threads` threads, the caller's included unless
// `caller_works` is false (work that changes its thread's settings, e.g. its OpenMP team size).
template <class Fn>
void parallel_for(int64_t n, int64_t threads, Fn&& fn, OnError on_error = OnError::kFinishAll,
                  bool caller_works = true) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max<int64_t>(0, n)));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      if (on_error == OnError::kStopEarly && failed.load()) return;
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
        failed = true;
      }
    }
  };
  const int64_t t = std::max<int64_t>(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int64_t k = caller_works ? 1 : 0; k < t; ++k) pool.emplace_back(worker);
  if (caller_works) worker();
  for (auto& th : pool) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Makes items on up to `threads` worker threads, at most `window` ahead of the consumer, and hands
// them to consume(i, item) on the calling thread in index order: make(i) -> T runs in parallel
// (parsing, compressing), consume writes in a deterministic order (a file whose layout does not
// depend on the thread count). The first failure of either side stops the workers and is
// rethrown after they have joined.
template <class Make, class Consume>
void ordered_pipeline(int64_t n, int64_t threads, int64_t window, Make&& make, Consume&& consume) {
  using T = decltype(make(int64_t{0}));
  std::vector<std::optional<T>> ready(static_cast<size_t>(std::max<int64_t>(0, n)));
  std::atomic<int64_t> next{0};
  int64_t consumed = 0;
  bool stop = false;
  std::exception_ptr error;
  std::mutex mutex;
  std::condition_variable cv;
  auto worker = [&] {
    while (true) {
      const int64_t i = next.fetch_add(1);
      if (i >= n) return;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stop || i < consumed + window; });
        if (stop) return;
      }
      try {
        T item = make(i);
        std::lock_guard<std::mutex> lock(mutex);
        ready[static_cast<size_t>(i)].emplace(std::move(item));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < std::max<int64_t>(1, std::min(threads, n)); ++t) pool.emplace_back(worker);
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    for (auto& th : pool) th.join();
  };
  try {
    for (int64_t i = 0; i < n; ++i) {
      std::optional<T> item;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return error || ready[static_cast<size_t>(i)].has_value(); });
        if (error) break;
        item = std::move(ready[static_cast<size_t>(i)]);
        ready[static_cast<size_t>(i)].reset();
      }
      consume(i, std::move(*item));
      item.reset();
      {
        std::lock_guard<std::mutex> lock(mutex);
        consumed = i + 1;
      }
      cv.notify_all();
    }
  } catch (...) {
    finish();
    throw;
  }
  finish();
  if (error) std::rethrow_exception(error);
}

// Cores of this machine (std::thread::hardware_concurrency(), at least 1).
inline int64_t core_count() { return static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())); }

// The most threads any setting (training.threads, data.workers, --threads) may ask for: this many
// per core. More only adds switching and memory; a typo such as 100000 would otherwise start
// thousands of threads (or fail deep inside with "Resource temporarily unavailable").
inline constexpr int64_t kMaxThreadsPerCore = 4;
inline int64_t max_threads() { return kMaxThreadsPerCore * core_count(); }

// Every core (at least 1) when `requested` is 0, else `requested`.
inline int64_t resolve_threads(int64_t requested) {
  if (requested > 0) return requested;
  return static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace u3d
