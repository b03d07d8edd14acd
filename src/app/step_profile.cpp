// trainer --benchmark --profile: the step's time by category (include/u3d/app/step_profile.h).
#include "u3d/app/step_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "u3d/core/errors.h"

namespace u3d {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

bool has_any(const std::string& s, std::initializer_list<const char*> parts) {
  return std::any_of(parts.begin(), parts.end(), [&](const char* p) { return s.find(p) != std::string::npos; });
}

bool is_any(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

// One operator's or kernel's time, summed over the profiled steps.
struct OpTotal {
  double ns = 0;
  int64_t calls = 0;
};

// CPU self time per operator: duration less the direct children's, children found by nesting on
// each thread (events sorted by thread, start, longest first).
std::map<std::string, OpTotal> cpu_self_times(const std::vector<prof::KinetoEvent>& events) {
  std::vector<const prof::KinetoEvent*> cpu;
  for (const auto& e : events) {
    if (e.deviceType() == c10::DeviceType::CPU && !e.isAsync() && e.durationNs() > 0) cpu.push_back(&e);
  }
  std::sort(cpu.begin(), cpu.end(), [](const prof::KinetoEvent* a, const prof::KinetoEvent* b) {
    if (a->startThreadId() != b->startThreadId()) return a->startThreadId() < b->startThreadId();
    if (a->startNs() != b->startNs()) return a->startNs() < b->startNs();
    return a->durationNs() > b->durationNs();
  });
  std::vector<double> child_ns(cpu.size(), 0.0);
  std::vector<size_t> stack;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (i > 0 && cpu[i]->startThreadId() != cpu[i - 1]->startThreadId()) stack.clear();
    while (!stack.empty() && cpu[stack.back()]->endNs() <= cpu[i]->startNs()) stack.pop_back();
    if (!stack.empty()) child_ns[stack.back()] += static_cast<double>(cpu[i]->durationNs());
    stack.push_back(i);
  }
  std::map<std::string, OpTotal> totals;
  for (size_t i = 0; i < cpu.size(); ++i) {
    OpTotal& t = totals[cpu[i]->name()];
    t.ns += std::max(0.0, static_cast<double>(cpu[i]->durationNs()) - child_ns[i]);
    ++t.calls;
  }
  return totals;
}

// Device time per launching operator (or kernel name when no operator is linked).
std::map<std::string, OpTotal> cuda_device_times(const std::vector<prof::KinetoEvent>& events) {
  // Correlation id -> CPU operator; the CUDA runtime's calls (cudaLaunchKernel, ...) number theirs
  // in CUPTI's own sequence and are left out.
  std::unordered_map<uint64_t, std::string> op_of;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CPU || e.correlationId() == 0 || e.name().rfind("cu", 0) == 0) continue;
    op_of[e.correlationId()] = e.name();
  }
  std::map<std::string, OpTotal> totals;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CUDA || e.durationNs() == 0) continue;
    const auto linked = op_of.find(e.linkedCorrelationId());
    OpTotal& t = totals[linked != op_of.end() ? linked->second : e.name()];
    t.ns += static_cast<double>(e.durationNs());
    ++t.calls;
  }
  return totals;
}

}  // namespace

const std::vector<std::string>& profile_categories() {
  static const std::vector<std::string> kCategories = {"convolution", "normalisation", "activation",
                                                       "elementwise", "copy/cast",     "reduction",
                                                       "loss",        "optimizer",     "other"};
  return kCategories;
}

std::string op_category(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // The operator's own name: "aten::add_" -> "add", "ConvolutionBackward0" kept whole.
  std::string base = n.substr(n.rfind("::") == std::string::npos ? 0 : n.rfind("::") + 2);
  while (!base.empty() && base.back() == '_') base.pop_back();
  if (has_any(n, {"_fused_", "_foreach_", "_amp_", "optim", "multi_tensor"})) return "optimizer";
  if (has_any(n, {"conv", "gemm", "xmma", "cutlass", "wgrad", "dgrad"}) ||
      is_any(base, {"mm", "addmm", "bmm", "matmul", "linear", "baddbmm"}) || has_any(n, {"mmbackward"})) {
    return "convolution";
  }
  if (has_any(n, {"loss", "nll", "cross_entropy"})) return "loss";
  const bool vector_norm = has_any(n, {"vector_norm", "linalg", "frobenius"}) || base == "norm";
  if (!vector_norm && has_any(n, {"norm", "bn_fw", "bn_bw", "welford"})) return "normalisation";
  if (has_any(n, {"relu", "gelu", "elu", "sigmoid", "tanh", "softmax", "threshold", "silu", "hardswish"})) {
    return "activation";
  }
  if (has_any(n, {"copy", "memcpy", "memset", "clone", "contiguous", "cat_", "catarray", "stack"}) ||
      is_any(base, {"to", "cat", "_to_copy", "type_as"})) {
    return "copy/cast";
  }
  if (vector_norm || has_any(n, {"reduce", "sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "cumsum"}) ||
      is_any(base, {"max", "min", "all", "any", "std", "var"})) {
    return "reduction";
  }
  if (has_any(n, {"elementwise", "add",       "sub",     "mul",     "div",  "where",      "clamp", "abs",
                  "pow",         "sqrt",      "exp",     "log",     "neg",  "fill",       "zero",  "isfinite",
                  "isnan",       "logical",   "maximum", "minimum", "sign", "reciprocal", "lerp",  "masked",
                  "bitwise",     "index_put", "scatter", "gather",  "lt_",  "gt_"}) ||
      is_any(base, {"eq", "ne", "lt", "le", "gt", "ge", "rsub", "floor", "ceil", "round"})) {
    return "elementwise";
  }
  return "other";
}

StepProfile profile_steps(const std::function<void()>& step, int64_t steps, const torch::Device& device) {
  if (steps < 1) throw UsageError("--profile: at least 1 profiled step");
  const bool cuda = device.is_cuda();
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    for (int64_t i = 0; i < steps; ++i) {
      step();
      if (cuda) torch::cuda::synchronize();
    }
  } catch (...) {
    prof::disableProfiler();
    throw;
  }
  result = prof::disableProfiler();
  const auto totals = cuda ? cuda_device_times(result->events()) : cpu_self_times(result->events());

  StepProfile p;
  p.steps = steps;
  p.source = cuda ? "cuda device time" : "cpu self time";
  const auto& names = profile_categories();
  p.category_ms.assign(names.size(), 0.0);
  std::vector<ProfileOp> ops;
  const double per_step = 1e-6 / static_cast<double>(steps);  // ns over all steps -> ms per step
  for (const auto& [name, t] : totals) {
    const std::string category = op_category(name);
    const auto at = std::find(names.begin(), names.end(), category) - names.begin();
    p.category_ms[static_cast<size_t>(at)] += t.ns * per_step;
    ops.push_back({name, category, t.ns * per_step, t.calls});
  }
  for (const double ms : p.category_ms) p.total_ms += ms;
  std::sort(ops.begin(), ops.end(),
            [](const ProfileOp& a, const ProfileOp& b) { return a.ms_per_step > b.ms_per_step; });
  if (ops.size() > 10) ops.resize(10);
  p.top = std::move(ops);
  return p;
}

void print_step_profile(const StepProfile& p) {
  std::printf("profile        %lld steps under LibTorch's profiler (%s), ms per step\n",
              static_cast<long long>(p.steps), p.source.c_str());
  const auto& names = profile_categories();
  for (size_t i = 0; i < names.size(); ++i) {
    const double share = p.total_ms > 0 ? p.category_ms[i] / p.total_ms : 0.0;
    std::printf("  %-14s %10.3f ms  %5.1f%%\n", names[i].c_str(), p.category_ms[i], 100.0 * share);
  }
  std::printf("  %-14s %10.3f ms\n", "total", p.total_ms);
  std::printf("top ops        ms per step, calls over the profiled steps\n");
  for (const auto& op : p.top) {
    std::printf("  %10.3f ms  %6lld  %-13s %s\n", op.ms_per_step, static_cast<long long>(op.calls), op.category.c_str(),
                op.name.c_str());
  }
}

Json step_profile_json(const StepProfile& p) {
  Json categories = Json::object();
  const auto& names = profile_categories();
  for (size_t i = 0; i < names.size(); ++i) {
    categories[names[i]] = {{"ms", json_number(p.category_ms[i], 4)},
                            {"share", json_number(p.total_ms > 0 ? p.category_ms[i] / p.total_ms : 0.0, 4)}};
  }
  Json top = Json::array();
  for (const auto& op : p.top) {
    top.push_back(
        {{"name", op.name}, {"category", op.category}, {"ms", json_number(op.ms_per_step, 4)}, {"calls", op.calls}});
  }
  return {{"benchmark", "step_profile"}, {"steps", p.steps},
          {"source", p.source},          {"total_ms_per_step", json_number(p.total_ms, 4)},
          {"categories", categories},    {"top_ops", top}};
}

}  // namespace u3d
