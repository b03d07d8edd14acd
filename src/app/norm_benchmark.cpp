#include "u3d/app/norm_benchmark.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/version.h"
#include "u3d/kernels/cudnn_norm_act.h"
#include "u3d/kernels/fused_families.h"
#include "u3d/kernels/fused_norm_act.h"
#include "u3d/model/channels_last_batch_norm.h"
#include "u3d/model/fused_kernels.h"

namespace u3d {
namespace {

constexpr double kNormNotMeasured = std::numeric_limits<double>::quiet_NaN();
const char* const kNormWays[] = {"aten", "ours", "cudnn"};

struct NormSite {
  bool batch = true;               // batch norm; false: instance norm
  std::array<int64_t, 5> shape{};  // (N, C, D, H, W)
  NormActivation act = NormActivation::kRelu;
  double slope = 0.0;  // leaky_relu's negative slope
  double eps = 1e-5, momentum = 0.1;
  int64_t count = 1;
};

struct NormWay {
  std::string status = "ok";
  double fwd_ms = kNormNotMeasured, fwd_bwd_ms = kNormNotMeasured;
  double y_diff = kNormNotMeasured, dx_diff = kNormNotMeasured, dweight_diff = kNormNotMeasured,
         dbias_diff = kNormNotMeasured;
};

// ---- SITES.json ----------------------------------------------------------------------------------

torch::ScalarType norm_precision_dtype(const std::string& p, const std::string& file) {
  if (p == "bf16") return torch::kBFloat16;
  if (p == "fp16") return torch::kHalf;
  if (p == "fp32") return torch::kFloat;
  throw ConfigError(fmt::format("{}: precision '{}': expected bf16, fp16 or fp32", file, p));
}

NormSite parse_norm_site(const Json& j, const std::string& where) {
  NormSite s;
  try {
    const auto norm = j.at("norm").get<std::string>();
    if (norm != "batch" && norm != "instance")
      throw ConfigError(fmt::format("norm '{}': expected batch or instance", norm));
    s.batch = norm == "batch";
    const auto shape = j.at("shape").get<std::vector<int64_t>>();
    if (shape.size() != 4 && shape.size() != 5) throw ConfigError("shape: expected [N, C, D, H, W] or [N, C, H, W]");
    for (const auto v : shape)
      if (v < 1) throw ConfigError(fmt::format("shape [{}]: sizes must be positive", fmt::join(shape, ", ")));
    s.shape = shape.size() == 5 ? std::array<int64_t, 5>{shape[0], shape[1], shape[2], shape[3], shape[4]}
                                : std::array<int64_t, 5>{shape[0], shape[1], 1, shape[2], shape[3]};
    const auto act = j.value("activation", std::string("relu"));
    if (act == "relu")
      s.act = NormActivation::kRelu;
    else if (act == "leaky_relu")
      s.act = NormActivation::kLeakyRelu;
    else if (act == "none")
      s.act = NormActivation::kNone;
    else
      throw ConfigError(fmt::format("activation '{}': expected relu, leaky_relu or none", act));
    s.slope = s.act == NormActivation::kLeakyRelu ? j.value("negative_slope", 0.01) : 0.0;
    s.eps = j.value("eps", 1e-5);
    s.momentum = j.value("momentum", 0.1);
    s.count = j.value("count", int64_t{1});
    if (s.count < 1) throw ConfigError("count: expected at least 1");
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  }
  return s;
}

// ---- the three ways --------------------------------------------------------------------------------

double norm_rel_diff(const torch::Tensor& a, const torch::Tensor& ref) {
  const auto r = ref.detach().to(torch::kFloat);
  const double scale = std::max(r.abs().max().item<double>(), 1e-12);
  return (a.detach().to(torch::kFloat) - r).abs().max().item<double>() / scale;
}

// Mean ms of `fn` over `steps` runs after `warmup` untimed ones.
double norm_time_ms(const std::function<void()>& fn, int steps, int warmup, const torch::Device& device) {
  for (int i = 0; i < warmup; ++i) fn();
  if (device.is_cuda()) {
    at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
    start.record();
    for (int i = 0; i < steps; ++i) fn();
    end.record();
    end.synchronize();
    return static_cast<double>(start.elapsed_time(end)) / steps;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

struct NormInputs {
  torch::Tensor x, weight, bias, dy;
};

struct NormOutputs {
  torch::Tensor y, dx, dweight, dbias;
};

void compare_to_aten(NormWay& w, const NormOutputs& got, const NormOutputs& ref) {
  w.y_diff = norm_rel_diff(got.y, ref.y);
  w.dx_diff = norm_rel_diff(got.dx, ref.dx);
  w.dweight_diff = norm_rel_diff(got.dweight, ref.dweight);
  w.dbias_diff = norm_rel_diff(got.dbias, ref.dbias);
}

// The trainer's layer call (aten: fused families off; ours: the site's family on).
class NormLayer {
 public:
  NormLayer(const NormSite& site, const NormInputs& in) : site_(site) {
    if (site.batch) {
      bn_ = torch::nn::BatchNorm3d(torch::nn::BatchNorm3dOptions(site.shape[1]).eps(site.eps).momentum(site.momentum));
      bn_->to(in.x.device());
      torch::NoGradGuard no_grad;
      bn_->weight.copy_(in.weight);
      bn_->bias.copy_(in.bias);
      weight_ = bn_->weight, bias_ = bn_->bias;
    } else {
      weight_ = in.weight.clone().requires_grad_(true);
      bias_ = in.bias.clone().requires_grad_(true);
    }
    x_ = in.x.detach().clone().requires_grad_(true);
  }

  torch::Tensor forward() {
    return site_.batch ? batch_norm_act(*bn_, x_, site_.act, site_.slope)
                       : channels_last_norm(x_, weight_, bias_, /*groups=*/0, site_.eps, site_.act, site_.slope);
  }

  NormOutputs forward_backward(const torch::Tensor& dy) {
    NormOutputs o;
    o.y = forward();
    const auto g = torch::autograd::grad({o.y}, {x_, weight_, bias_}, {dy});
    o.dx = g[0], o.dweight = g[1], o.dbias = g[2];
    return o;
  }

 private:
  NormSite site_;
  torch::nn::BatchNorm3d bn_{nullptr};
  torch::Tensor x_, weight_, bias_;
};

kernels::Family norm_family(const NormSite& s) {
  return s.batch ? kernels::Family::kBatchNorm : kernels::Family::kGroupNorm;
}

NormWay run_norm_layer(const NormSite& site, const NormInputs& in, bool fused, const std::optional<NormOutputs>& ref,
                       int steps, int warmup, NormOutputs* out) {
  NormWay w;
  const FusedKernelsScope scope(fused ? kernels::bit(norm_family(site)) : kernels::kNoFamilies);
  NormLayer layer(site, in);
  const auto result = layer.forward_backward(in.dy);
  if (ref) compare_to_aten(w, result, *ref);
  if (out) *out = result;
  const auto device = in.x.device();
  w.fwd_ms = norm_time_ms([&] { (void)layer.forward(); }, steps, warmup, device);
  w.fwd_bwd_ms = norm_time_ms([&] { (void)layer.forward_backward(in.dy); }, steps, warmup, device);
  return w;
}

std::string ours_unavailable(const NormInputs& in) {
  if (!kernels::built()) return "not built (no CUDA kernels in this build)";
  if (!in.x.is_cuda()) return "not on the CPU";
  if (!kernels::applies(in.x, in.weight, in.bias)) return "not applicable (the kernels do not take this tensor)";
  return "";
}

NormWay run_cudnn_norm(const NormSite& site, const NormInputs& in, const NormOutputs& ref, int steps, int warmup) {
  NormWay w;
  if (!kernels::cudnn_graphs_built()) return NormWay{"not built (no cudnn-frontend in this build)"};
  if (!in.x.is_cuda()) return NormWay{"not on the CPU"};
  kernels::CudnnNormActSpec spec;
  spec.norm = site.batch ? kernels::CudnnNorm::kBatch : kernels::CudnnNorm::kInstance;
  spec.shape = site.shape;
  spec.dtype = in.x.scalar_type();
  spec.act = fused_activation(site.act, site.slope);
  spec.eps = site.eps;
  spec.momentum = site.momentum;
  try {
    kernels::CudnnNormAct graphs(spec);
    const auto f32 = in.weight.options();
    std::array<torch::Tensor, 2> running_a{torch::zeros({site.shape[1]}, f32), torch::ones({site.shape[1]}, f32)};
    std::array<torch::Tensor, 2> running_b{torch::zeros({site.shape[1]}, f32), torch::ones({site.shape[1]}, f32)};
    kernels::CudnnNormStats stats;
    NormOutputs got;
    got.y = graphs.forward(in.x, in.weight, in.bias, stats, running_a, running_b);
    const auto g = graphs.backward(in.dy, in.x, got.y, in.weight, stats);
    got.dx = g.dx, got.dweight = g.dweight, got.dbias = g.dbias;
    compare_to_aten(w, got, ref);
    const auto device = in.x.device();
    w.fwd_ms = norm_time_ms([&] { (void)graphs.forward(in.x, in.weight, in.bias, stats, running_a, running_b); }, steps,
                            warmup, device);
    w.fwd_bwd_ms = norm_time_ms(
        [&] {
          const auto y = graphs.forward(in.x, in.weight, in.bias, stats, running_a, running_b);
          (void)graphs.backward(in.dy, in.x, y, in.weight, stats);
        },
        steps, warmup, device);
  } catch (const TrainingError& e) {  // cuDNN refused the graphs (its words), or a tensor it cannot take
    return NormWay{std::string("not supported: ") + e.what()};
  } catch (const std::exception& e) {  // the frontend's own failures (a symbol, a library): reported, not fatal
    return NormWay{std::string("failed: ") + error_line(e)};
  }
  return w;
}

// ---- report ----------------------------------------------------------------------------------------

Json norm_way_json(const NormWay& w) {
  Json j{{"status", w.status}, {"fwd_ms", json_number(w.fwd_ms, 4)}, {"fwd_bwd_ms", json_number(w.fwd_bwd_ms, 4)}};
  if (!std::isnan(w.y_diff)) {
    j["y_diff"] = json_number(w.y_diff, 6);
    j["dx_diff"] = json_number(w.dx_diff, 6);
    j["dweight_diff"] = json_number(w.dweight_diff, 6);
    j["dbias_diff"] = json_number(w.dbias_diff, 6);
  }
  return j;
}

std::string norm_activation_name(const NormSite& s) {
  return s.act == NormActivation::kNone ? "none" : s.act == NormActivation::kRelu ? "relu" : "leaky_relu";
}

std::string norm_cell(const NormWay& w) {
  return w.status == "ok" ? fmt::format("{:9.3f}", w.fwd_bwd_ms) : "        -";
}

}  // namespace

int norm_benchmark_command(const NormBenchCommand& cmd) {
  if (cmd.steps < 1 || cmd.warmup < 0)
    throw UsageError("bench-norm: --steps must be at least 1 and --warmup at least 0");
  const Json spec = parse_json(read_file(cmd.sites), cmd.sites);
  if (!spec.is_object() || !spec.contains("sites") || !spec["sites"].is_array() || spec["sites"].empty())
    throw ConfigError(fmt::format("{}: expected an object with a non-empty \"sites\" list", cmd.sites));
  const std::string precision = spec.value("precision", std::string("bf16"));
  const auto dtype = norm_precision_dtype(precision, cmd.sites);
  std::vector<NormSite> sites;
  for (size_t i = 0; i < spec["sites"].size(); ++i)
    sites.push_back(parse_norm_site(spec["sites"][i], fmt::format("{}: sites[{}]", cmd.sites, i)));

  if (cmd.device != "auto" && cmd.device != "cuda" && cmd.device != "cpu")
    throw UsageError(fmt::format("bench-norm: --device '{}': expected auto, cuda or cpu", cmd.device));
  const bool cuda = cmd.device == "cuda" || (cmd.device == "auto" && torch::cuda::is_available());
  if (cuda && !torch::cuda::is_available()) throw UsageError("bench-norm: --device cuda, but no CUDA device is usable");
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const std::string gpu =
      cuda ? fmt::format("{} ({})", at::cuda::getCurrentDeviceProperties()->name, kernels::device_architecture(device))
           : "";

  torch::manual_seed(0);
  Json site_rows = Json::array();
  std::map<std::string, double> sum;
  std::map<std::string, int64_t> covered;
  int64_t layers = 0;
  std::fprintf(stderr, "%-9s %-24s %-12s %6s %9s %9s %9s  (fwd+bwd ms per layer)\n", "norm", "shape", "activation",
               "count", "aten", "ours", "cudnn");
  for (const auto& site : sites) {
    const auto opts = torch::TensorOptions().device(device);
    NormInputs in;
    in.x = torch::randn({site.shape[0], site.shape[1], site.shape[2], site.shape[3], site.shape[4]}, opts.dtype(dtype))
               .contiguous(at::MemoryFormat::ChannelsLast3d);
    in.weight = 1.0 + 0.1 * torch::randn({site.shape[1]}, opts.dtype(torch::kFloat));
    in.bias = 0.1 * torch::randn({site.shape[1]}, opts.dtype(torch::kFloat));
    in.dy = torch::randn_like(in.x).contiguous(at::MemoryFormat::ChannelsLast3d);

    std::map<std::string, NormWay> ways;
    NormOutputs ref;
    ways["aten"] = run_norm_layer(site, in, /*fused=*/false, std::nullopt, cmd.steps, cmd.warmup, &ref);
    const auto why_not = ours_unavailable(in);
    ways["ours"] = why_not.empty() ? run_norm_layer(site, in, /*fused=*/true, ref, cmd.steps, cmd.warmup, nullptr)
                                   : NormWay{why_not};
    ways["cudnn"] = run_cudnn_norm(site, in, ref, cmd.steps, cmd.warmup);

    Json row{{"norm", site.batch ? "batch" : "instance"},
             {"shape", site.shape},
             {"activation", norm_activation_name(site)},
             {"negative_slope", site.slope},
             {"count", site.count}};
    for (const char* name : kNormWays) {
      row[name] = norm_way_json(ways[name]);
      if (ways[name].status == "ok") {
        sum[name] += ways[name].fwd_bwd_ms * static_cast<double>(site.count);
        covered[name] += 1;
      }
    }
    site_rows.push_back(row);
    layers += site.count;
    std::fprintf(stderr, "%-9s %-24s %-12s %6lld %s %s %s\n", site.batch ? "batch" : "instance",
                 fmt::format("{}", fmt::join(site.shape, "x")).c_str(), norm_activation_name(site).c_str(),
                 static_cast<long long>(site.count), norm_cell(ways["aten"]).c_str(), norm_cell(ways["ours"]).c_str(),
                 norm_cell(ways["cudnn"]).c_str());
    for (const char* name : {"ours", "cudnn"})
      if (ways[name].status != "ok") std::fprintf(stderr, "  %s: %s\n", name, ways[name].status.c_str());
  }

  Json sums = Json::object(), counts = Json::object();
  for (const char* name : kNormWays) {
    sums[name] = covered[name] > 0 ? json_number(sum[name], 4) : Json(nullptr);
    counts[name] = covered[name];
  }
  const Json line{{"benchmark", "norm"},
                  {"device", cuda ? "cuda" : "cpu"},
                  {"gpu", cuda ? Json(gpu) : Json(nullptr)},
                  {"precision", precision},
                  {"cudnn", cuda ? kernels::cudnn_graphs_runtime() : std::string("not on the CPU")},
                  {"steps", cmd.steps},
                  {"warmup", cmd.warmup},
                  {"layers", layers},
                  {"sites", site_rows},
                  {"sum_ms", sums},
                  {"sum_sites", counts},
                  {"version", version()},
                  {"commit", git_commit()}};
  std::printf("%s\n", json_line(line).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace u3d
