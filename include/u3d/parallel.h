// Host-side parallel loops for file work (import, evaluation): plain threads, no LibTorch pool.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace u3d {

// Runs fn(i) for every i in [0, n) on up to `threads` threads (the caller's included). Every index
// runs even when some fail; afterwards the error of the lowest failing index is rethrown, so the
// message does not depend on the thread count or timing.
template <class Fn>
void parallel_for(int64_t n, int64_t threads, Fn&& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max<int64_t>(0, n)));
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  const int64_t t = std::max<int64_t>(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int64_t k = 1; k < t; ++k) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
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
