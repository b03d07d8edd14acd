#include "u3d/kernels/cudnn_norm_act.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "u3d/core/errors.h"

#ifdef U3D_CUDNN_GRAPHS
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include <cudnn_frontend.h>

// cudnn-frontend's dynamic loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING) resolves every cuDNN call
// through this handle: LibTorch's own libcudnn.so.9, opened once below.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace u3d::kernels {

#ifdef U3D_CUDNN_GRAPHS
namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

namespace {

// The libcudnn.so.9 already in the process (LibTorch's), else the one the loader finds; "" or why not.
const std::string& load_cudnn() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    // The frontend's CUDA runtime calls go to the runtime LibTorch loaded (it would try
    // libcudart.so.12 first), unless the user named one.
    const std::string cudart = fmt::format("libcudart.so.{}", CUDART_VERSION / 1000);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), /*overwrite=*/0);
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) handle = dlopen("libcudnn.so.9", RTLD_NOW);
    if (handle == nullptr) {
      const char* why = dlerror();
      error = fmt::format("cannot load libcudnn.so.9 ({})", why ? why : "not found");
      return;
    }
    fe::cudnn_dlhandle = handle;
  });
  return error;
}

// cuDNN's words on one line: the frontend joins its reasons with newlines ("No valid engine configs
// for ...\n...", "Plan at index i: ..."), and a refusal is reported as one line.
std::string one_line(const std::string& message) {
  std::string out;
  for (const char ch : message) {
    if (ch == '\n' || ch == '\r') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else {
      out += ch;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

void check(fe::error_t status, const char* what) {
  if (!status.is_good()) throw TrainingError(fmt::format("cuDNN graph ({}): {}", what, one_line(status.get_message())));
}

fe::DataType_t fe_type(torch::ScalarType t) {
  switch (t) {
    case torch::kHalf: return fe::DataType_t::HALF;
    case torch::kBFloat16: return fe::DataType_t::BFLOAT16;
    case torch::kFloat: return fe::DataType_t::FLOAT;
    default:
      throw TrainingError(fmt::format("cuDNN graph: dtype {} is not float16, bfloat16 or float32", c10::toString(t)));
  }
}

// (N, C, D, H, W) in NDHWC memory.
TensorAttr activation_tensor(fe::graph::Graph& g, const char* name, const std::array<int64_t, 5>& d,
                             fe::DataType_t type) {
  const int64_t c = d[1], dd = d[2], h = d[3], w = d[4];
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({d[0], c, dd, h, w})
                      .set_stride({c * dd * h * w, 1, h * w * c, w * c, c})
                      .set_data_type(type));
}

// float32 (rows, C, 1, 1, 1), C fastest: a per-channel vector (rows 1) or an (N, C) table.
TensorAttr channel_tensor(fe::graph::Graph& g, const char* name, int64_t rows, int64_t c) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({rows, c, 1, 1, 1})
                      .set_stride({c, 1, c, c, c})
                      .set_data_type(fe::DataType_t::FLOAT));
}

fe::graph::Pointwise_attributes activation_attributes(fe::PointwiseMode_t mode, double slope) {
  auto a = fe::graph::Pointwise_attributes().set_mode(mode);
  if (slope != 0.0) a.set_relu_lower_clip_slope(static_cast<float>(slope));
  return a;
}

void set_types(fe::graph::Graph& g, fe::DataType_t io) {
  g.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
}

void build(fe::graph::Graph& g, cudnnHandle_t handle, int64_t& workspace) {
  check(g.validate(), "validate");
  check(g.build_operation_graph(handle), "build_operation_graph");
  check(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  check(g.check_support(handle), "check_support");
  check(g.build_plans(), "build_plans");
  check(g.get_workspace_size(workspace), "get_workspace_size");
}

void* ptr(const torch::Tensor& t) { return t.data_ptr(); }

// A tensor the graphs were built for: on their device, the spec's shape and dtype, NDHWC; or a float32
// vector of c values (a (C) parameter or an (N, C) statistics table).
void require_activation(const torch::Tensor& t, const CudnnNormActSpec& spec, int device, const char* name) {
  const bool ok = t.defined() && t.is_cuda() && t.get_device() == device && t.scalar_type() == spec.dtype &&
                  t.dim() == 5 && t.sizes() == c10::IntArrayRef(spec.shape.data(), spec.shape.size()) &&
                  t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
  if (!ok)
    throw TrainingError(fmt::format("cuDNN graph: {} must be a {} tensor on cuda:{} of shape {} in ChannelsLast3d",
                                    name, c10::toString(spec.dtype), device, fmt::join(spec.shape, "x")));
}

// The values of each saved statistic: batch norm C, instance norm N x C.
int64_t stat_rows(const CudnnNormActSpec& spec) {
  return (spec.norm == CudnnNorm::kBatch ? 1 : spec.shape[0]) * spec.shape[1];
}

void require_channels(const torch::Tensor& t, int64_t c, int device, const char* name) {
  if (!t.defined() || !t.is_cuda() || t.get_device() != device || t.scalar_type() != torch::kFloat || t.numel() != c ||
      !t.is_contiguous())
    throw TrainingError(
        fmt::format("cuDNN graph: {} must be a contiguous float32 tensor on cuda:{} of {} values", name, device, c));
}

}  // namespace

struct CudnnNormAct::Graphs {
  fe::graph::Graph fwd, bwd;
  int64_t fwd_workspace = 0, bwd_workspace = 0;
  int device = 0;  // the CUDA device the graphs were built on; they run there
  // forward
  TensorAttr x, scale, bias, y, mean, inv_variance, prev_mean, prev_var, next_mean, next_var;
  // backward
  TensorAttr b_dy, b_x, b_y, b_scale, b_mean, b_inv_variance, dx, dscale, dbias;

  void execute(const fe::graph::Graph& g, std::unordered_map<TensorAttr, void*>& pack, int64_t workspace,
               const torch::Tensor& like, const char* what) {
    const auto scratch = torch::empty({std::max<int64_t>(workspace, 1)}, like.options().dtype(torch::kByte));
    check(g.execute(at::native::getCudnnHandle(), pack, scratch.data_ptr()), what);
  }
};

CudnnNormAct::CudnnNormAct(const CudnnNormActSpec& spec) : spec_(spec), graphs_(std::make_unique<Graphs>()) {
  if (const auto& error = load_cudnn(); !error.empty()) throw TrainingError("cuDNN graph: " + error);
  if (!torch::cuda::is_available()) throw TrainingError("cuDNN graph: no CUDA device");
  const bool batch = spec.norm == CudnnNorm::kBatch;
  const auto io = fe_type(spec.dtype);
  const int64_t c = spec.shape[1];
  const int64_t stat_rows = batch ? 1 : spec.shape[0];
  const double slope = spec.act.slope;
  const bool activate = slope != 1.0;
  auto& G = *graphs_;
  G.device = c10::cuda::current_device();
  const cudnnHandle_t handle = at::native::getCudnnHandle();

  set_types(G.fwd, io);
  G.x = activation_tensor(G.fwd, "x", spec.shape, io);
  G.scale = channel_tensor(G.fwd, "scale", 1, c);
  G.bias = channel_tensor(G.fwd, "bias", 1, c);
  auto eps = G.fwd.tensor(fe::graph::Tensor_attributes(static_cast<float>(spec.eps)));
  TensorAttr normed;
  if (batch) {
    auto momentum = G.fwd.tensor(fe::graph::Tensor_attributes(static_cast<float>(spec.momentum)));
    G.prev_mean = channel_tensor(G.fwd, "running_mean", 1, c);
    G.prev_var = channel_tensor(G.fwd, "running_var", 1, c);
    auto attributes = fe::graph::Batchnorm_attributes().set_epsilon(eps).set_previous_running_stats(
        G.prev_mean, G.prev_var, momentum);
    auto [out, mean, inv_variance, next_mean, next_var] = G.fwd.batchnorm(G.x, G.scale, G.bias, attributes);
    normed = out;
    G.mean = mean;
    G.inv_variance = inv_variance;
    G.next_mean = next_mean;
    G.next_var = next_var;
    G.next_mean->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    G.next_var->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto attributes =
        fe::graph::Instancenorm_attributes().set_forward_phase(fe::NormFwdPhase_t::TRAINING).set_epsilon(eps);
    auto [out, mean, inv_variance] = G.fwd.instancenorm(G.x, G.scale, G.bias, attributes);
    normed = out;
    G.mean = mean;
    G.inv_variance = inv_variance;
  }
  G.mean->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  G.inv_variance->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  G.y = activate ? G.fwd.pointwise(normed, activation_attributes(fe::PointwiseMode_t::RELU_FWD, slope)) : normed;
  G.y->set_output(true).set_data_type(io);
  build(G.fwd, handle, G.fwd_workspace);

  set_types(G.bwd, io);
  G.b_dy = activation_tensor(G.bwd, "dy", spec.shape, io);
  G.b_x = activation_tensor(G.bwd, "x", spec.shape, io);
  G.b_scale = channel_tensor(G.bwd, "scale", 1, c);
  G.b_mean = channel_tensor(G.bwd, "mean", stat_rows, c);
  G.b_inv_variance = channel_tensor(G.bwd, "inv_variance", stat_rows, c);
  TensorAttr grad = G.b_dy;
  if (activate) {
    G.b_y = activation_tensor(G.bwd, "y", spec.shape, io);
    grad = G.bwd.pointwise(G.b_dy, G.b_y, activation_attributes(fe::PointwiseMode_t::RELU_BWD, slope));
    grad->set_data_type(io);
  }
  if (batch) {
    auto attributes =
        fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(G.b_mean, G.b_inv_variance);
    auto [dx, dscale, dbias] = G.bwd.batchnorm_backward(grad, G.b_x, G.b_scale, attributes);
    G.dx = dx, G.dscale = dscale, G.dbias = dbias;
  } else {
    auto attributes =
        fe::graph::Instancenorm_backward_attributes().set_saved_mean_and_inv_variance(G.b_mean, G.b_inv_variance);
    auto [dx, dscale, dbias] = G.bwd.instancenorm_backward(grad, G.b_x, G.b_scale, attributes);
    G.dx = dx, G.dscale = dscale, G.dbias = dbias;
  }
  G.dx->set_output(true).set_data_type(io);
  G.dscale->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  G.dbias->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  build(G.bwd, handle, G.bwd_workspace);
}

CudnnNormAct::~CudnnNormAct() = default;

torch::Tensor CudnnNormAct::forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                    CudnnNormStats& stats, const std::array<torch::Tensor, 2>& running_in,
                                    const std::array<torch::Tensor, 2>& running_out) {
  auto& G = *graphs_;
  const bool batch = spec_.norm == CudnnNorm::kBatch;
  require_activation(x, spec_, G.device, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  require_channels(weight, spec_.shape[1], G.device, "weight");
  require_channels(bias, spec_.shape[1], G.device, "bias");
  const auto f32 = x.options().dtype(torch::kFloat);
  const std::vector<int64_t> stat_shape =
      batch ? std::vector<int64_t>{x.size(1)} : std::vector<int64_t>{x.size(0), x.size(1)};
  if (!stats.mean.defined()) stats.mean = torch::empty(stat_shape, f32);
  if (!stats.inv_variance.defined()) stats.inv_variance = torch::empty(stat_shape, f32);
  require_channels(stats.mean, stat_rows(spec_), G.device, "the saved mean");
  require_channels(stats.inv_variance, stat_rows(spec_), G.device, "the saved inv_variance");
  auto y = torch::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast3d);
  std::unordered_map<TensorAttr, void*> pack = {
      {G.x, ptr(x)}, {G.scale, ptr(weight)},    {G.bias, ptr(bias)},
      {G.y, ptr(y)}, {G.mean, ptr(stats.mean)}, {G.inv_variance, ptr(stats.inv_variance)}};
  if (batch) {
    if (!running_in[0].defined() || !running_out[0].defined())
      throw TrainingError("cuDNN graph: batch norm needs its running averages, in and out");
    for (const auto* t : {&running_in[0], &running_in[1], &running_out[0], &running_out[1]})
      require_channels(*t, spec_.shape[1], G.device, "a running average");
    pack[G.prev_mean] = ptr(running_in[0]);
    pack[G.prev_var] = ptr(running_in[1]);
    pack[G.next_mean] = ptr(running_out[0]);
    pack[G.next_var] = ptr(running_out[1]);
  }
  G.execute(G.fwd, pack, G.fwd_workspace, x, "forward");
  return y;
}

CudnnNormGrads CudnnNormAct::backward(const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& y,
                                      const torch::Tensor& weight, const CudnnNormStats& stats) {
  auto& G = *graphs_;
  require_activation(dy, spec_, G.device, "dy");
  require_activation(x, spec_, G.device, "x");
  if (G.b_y) require_activation(y, spec_, G.device, "y");
  const c10::cuda::CUDAGuard guard(x.device());
  require_channels(weight, spec_.shape[1], G.device, "weight");
  require_channels(stats.mean, stat_rows(spec_), G.device, "the saved mean");
  require_channels(stats.inv_variance, stat_rows(spec_), G.device, "the saved inv_variance");
  CudnnNormGrads out;
  out.dx = torch::empty_like(x, x.options(), at::MemoryFormat::ChannelsLast3d);
  out.dweight = torch::empty_like(weight);
  out.dbias = torch::empty_like(weight);
  std::unordered_map<TensorAttr, void*> pack = {{G.b_dy, ptr(dy)},
                                                {G.b_x, ptr(x)},
                                                {G.b_scale, ptr(weight)},
                                                {G.b_mean, ptr(stats.mean)},
                                                {G.b_inv_variance, ptr(stats.inv_variance)},
                                                {G.dx, ptr(out.dx)},
                                                {G.dscale, ptr(out.dweight)},
                                                {G.dbias, ptr(out.dbias)}};
  if (G.b_y) pack[G.b_y] = ptr(y);
  G.execute(G.bwd, pack, G.bwd_workspace, x, "backward");
  return out;
}

bool cudnn_graphs_built() { return true; }

std::string cudnn_graphs_runtime() {
  if (const auto& error = load_cudnn(); !error.empty()) return error;
  const auto v = static_cast<int64_t>(fe::detail::get_backend_version());
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

#else  // no cuDNN graphs in this build

struct CudnnNormAct::Graphs {};

CudnnNormAct::CudnnNormAct(const CudnnNormActSpec& spec) : spec_(spec) {
  throw TrainingError(
      "cuDNN graph: not built (this library was compiled without cudnn-frontend's headers or without its CUDA "
      "kernels; scripts/setup.sh installs them)");
}

CudnnNormAct::~CudnnNormAct() = default;

torch::Tensor CudnnNormAct::forward(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, CudnnNormStats&,
                                    const std::array<torch::Tensor, 2>&, const std::array<torch::Tensor, 2>&) {
  throw TrainingError("cuDNN graph: not built");
}

CudnnNormGrads CudnnNormAct::backward(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                      const torch::Tensor&, const CudnnNormStats&) {
  throw TrainingError("cuDNN graph: not built");
}

bool cudnn_graphs_built() { return false; }

std::string cudnn_graphs_runtime() { return "not built"; }

#endif

}  // namespace u3d::kernels
