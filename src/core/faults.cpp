#include "u3d/core/faults.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

int64_t number(const std::string& digits, const std::string& item) {
  const auto v = parse_int(digits);
  if (!v || *v < 0) throw UsageError(fmt::format("U3D_TEST_FAULTS: '{}': expected KIND@N or KIND@N-M", item));
  return *v;
}

}  // namespace

TestFaults TestFaults::parse(const std::string& text) {
  TestFaults f;
  for (const std::string& item : split(text)) {
    if (item.empty()) continue;
    const size_t at = item.find('@');
    const std::string kind = item.substr(0, at);
    const std::string value = at == std::string::npos ? "" : item.substr(at + 1);
    if (kind == "sampler_case") {
      if (value.empty()) throw UsageError(fmt::format("U3D_TEST_FAULTS: '{}': expected sampler_case@ID", item));
      f.sampler_case = value;
      continue;
    }
    const size_t dash = value.find('-');
    const int64_t lo = number(value.substr(0, dash), item);
    const int64_t hi = dash == std::string::npos ? lo : number(value.substr(dash + 1), item);
    if (kind == "slow_val") {
      f.slow_val_ms = lo;
    } else if (kind == "slow_step") {
      f.slow_step_ms = lo;
    } else if (kind == "checkpoint_delay") {
      f.checkpoint_delay_ms = lo;
    } else if (kind == "nan_batch" || kind == "inf_grad" || kind == "nan_val" || kind == "stop_micro") {
      auto& set = kind == "nan_batch"  ? f.nan_batch
                  : kind == "inf_grad" ? f.inf_grad
                  : kind == "nan_val"  ? f.nan_val
                                       : f.stop_micro;
      for (int64_t v = lo; v <= hi; ++v) set.insert(v);
    } else {
      throw UsageError(
          fmt::format("U3D_TEST_FAULTS: unknown fault '{}' (nan_batch, inf_grad, nan_val, stop_micro, slow_val, "
                      "slow_step, checkpoint_delay, sampler_case)",
                      kind));
    }
  }
  return f;
}

TestFaults TestFaults::from_env() {
  if constexpr (!kFaultInjection) {
    return {};
  } else {
    const char* env = std::getenv("U3D_TEST_FAULTS");
    if (!env || !*env) return {};
    TestFaults f = parse(env);
    static std::atomic<bool> warned{false};
    if (f.any() && !warned.exchange(true)) spdlog::warn("test fault injection is active (U3D_TEST_FAULTS={})", env);
    return f;
  }
}

}  // namespace u3d
