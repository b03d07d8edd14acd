#include "u3d/cache.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace u3d {

TensorCache TensorCache::load(const DatasetReader& reader, const std::vector<std::string>& ids,
                              const Preprocessor& pre, int64_t threads) {
  TensorCache cache;
  cache.cases_.resize(ids.size());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i >= ids.size()) return;
      {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error) return;
      }
      try {
        CaseData raw = reader.read_case(ids[i]);
        CachedCase c;
        c.id = raw.id;
        c.spacing = raw.spacing;
        c.image = pre.image(raw.image);
        if (raw.target.defined()) {
          c.target = pre.target(raw.target);
          if (pre.task() == Task::kDose) c.raw_target = raw.target;
        }
        if (raw.mask.defined()) c.mask = raw.mask.unsqueeze(0);
        cache.cases_[i] = std::move(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(threads, static_cast<int64_t>(ids.size())));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < n; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return cache;
}

bool TensorCache::has_targets() const {
  return !cases_.empty() && std::all_of(cases_.begin(), cases_.end(), [](const CachedCase& c) { return c.target.defined(); });
}

bool TensorCache::has_masks() const {
  return !cases_.empty() && std::all_of(cases_.begin(), cases_.end(), [](const CachedCase& c) { return c.mask.defined(); });
}

int64_t TensorCache::bytes() const {
  int64_t total = 0;
  for (const auto& c : cases_) {
    for (const auto* t : {&c.image, &c.target, &c.mask, &c.raw_target}) {
      if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
    }
  }
  return total;
}

double TensorCache::target_mean() const {
  double sum = 0, count = 0;
  for (const auto& c : cases_) {
    if (!c.raw_target.defined()) continue;
    if (c.mask.defined()) {
      const auto m = c.mask[0].to(torch::kBool);
      sum += c.raw_target.masked_select(m).sum().item<double>();
      count += static_cast<double>(m.sum().item<int64_t>());
    } else {
      sum += c.raw_target.sum().item<double>();
      count += static_cast<double>(c.raw_target.numel());
    }
  }
  return count > 0 ? sum / count : 0.0;
}

Shape3 TensorCache::min_shape() const {
  Shape3 s = {INT64_MAX, INT64_MAX, INT64_MAX};
  for (const auto& c : cases_) {
    for (int a = 0; a < 3; ++a) s[a] = std::min(s[a], c.image.size(a + 1));
  }
  return s;
}

}  // namespace u3d
