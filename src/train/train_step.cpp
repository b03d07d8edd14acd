#include "u3d/train_step.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "u3d/cuda_graph.h"
#include "u3d/errors.h"

namespace u3d {

std::string StepFeatures::describe() const {
  std::vector<std::string> parts{precision_name(precision)};
  parts.push_back(channels_last ? "channels-last" : "contiguous");
  parts.push_back(cuda_graph ? "CUDA graph" : "eager");
  if (fused_optimizer) parts.push_back("fused optimizer");
  if (cudnn_benchmark) parts.push_back("cuDNN autotune");
  if (tf32) parts.push_back("TF32");
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool resolve_channels_last(const ModelConfig& cfg, const torch::Device& device) {
  switch (cfg.channels_last) {
    case Toggle::kOn: return true;
    case Toggle::kOff: return false;
    case Toggle::kAuto: break;
  }
  return device.is_cuda();
}

void to_channels_last(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) {
    if (p.dim() == 5) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast3d));
  }
  for (auto& b : module.buffers()) {
    if (b.dim() == 5) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast3d));
  }
}

TrainStep::TrainStep(const Config& cfg, const torch::Device& device, NetworkImpl& net, const Loss& loss,
                     Optimizer& optimizer, StepMonitor* monitor)
    : cfg_(cfg), device_(device), net_(net), loss_(loss), optimizer_(optimizer), monitor_(monitor) {
  features_.precision = resolve_precision(cfg.training, device);
  features_.channels_last = resolve_channels_last(cfg.model, device);
  auto& ctx = at::globalContext();
  features_.cudnn_benchmark = device.is_cuda() && ctx.benchmarkCuDNN();
  features_.tf32 = device.is_cuda() && ctx.allowTF32CuDNN();
  autocast_ = autocast_dtype(features_.precision);
  if (features_.precision == Precision::kFp16) scaler_ = std::make_unique<GradScaler>(device);
  buffers_ = net.buffers();  // batch-norm running statistics and counters
  for (const auto& b : buffers_) saved_buffers_.push_back(torch::empty_like(b));
  last_found_inf_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));

  const Toggle graph = cfg.training.cuda_graph;
  if (graph == Toggle::kOn && !device.is_cuda()) {
    throw ConfigError(fmt::format("training.cuda_graph: on needs a CUDA device, and training runs on {}; use auto "
                                  "or off",
                                  device.str()));
  }
  if (graph == Toggle::kOff) {
    features_.cuda_graph_note = "off (training.cuda_graph)";
  } else if (!device.is_cuda()) {
    features_.cuda_graph_note = "not on CPU";
  } else {
    features_.cuda_graph = true;
    graph_ = std::make_unique<CudaGraphStep>(
        [this](const Batch& b, bool capturing) { return compute(b, capturing); }, cfg.training.graph_warmup_steps,
        /*required=*/graph == Toggle::kOn);
  }
  spdlog::info("training step: {}{}", features_.describe(),
               features_.cuda_graph_note.empty() ? "" : fmt::format(" (CUDA graph {})", features_.cuda_graph_note));
}

TrainStep::~TrainStep() = default;

void TrainStep::set_after_backward(std::function<void(const std::vector<torch::Tensor>&)> hook) {
  after_backward_ = std::move(hook);
  if (after_backward_ && graph_) {
    if (cfg_.training.cuda_graph == Toggle::kOn) {
      throw ConfigError("training.cuda_graph: on cannot be combined with test fault injection (U3D_TEST_FAULTS)");
    }
    graph_.reset();
    features_.cuda_graph = false;
    features_.cuda_graph_note = "off: test fault injection is active";
    spdlog::info("training step: CUDA graph off: test fault injection is active; eager steps");
  }
}

StepOutputs TrainStep::compute(const Batch& batch, bool capturing) {
  if (!buffers_.empty()) torch::_foreach_copy_(saved_buffers_, buffers_);
  optimizer_.zero_grad();
  const torch::Tensor image =
      features_.channels_last ? batch.image.contiguous(at::MemoryFormat::ChannelsLast3d) : batch.image;
  // model.deep_supervision: one output per decoder stage, finest first (segmentation).
  const bool deep = cfg_.model.deep_supervision;
  std::vector<torch::Tensor> outs;
  {
    std::optional<AutocastGuard> autocast;
    if (autocast_) autocast.emplace(device_.type(), *autocast_, /*cache_enabled=*/!capturing);
    if (deep) {
      outs = net_.forward_deep(image);
    } else {
      outs.push_back(net_.forward(image));
    }
  }
  // The loss in float32 (reductions over ~10^6 voxels), outside autocast.
  for (auto& o : outs) o = o.to(torch::kFloat);
  torch::Tensor loss;
  if (deep) {
    if (deep_weights_.size() != outs.size()) deep_weights_ = deep_supervision_weights(static_cast<int64_t>(outs.size()));
    loss = deep_supervision_loss(loss_, outs, batch.target, deep_weights_);
  } else {
    loss = loss_(outs[0], batch.target, batch.mask);
  }
  if (scaler_) {
    (loss * scaler_->scale()).backward();
  } else {
    loss.backward();
  }
  if (after_backward_) after_backward_(optimizer_.params());
  torch::Tensor found_inf;
  if (scaler_) found_inf = scaler_->unscale_(optimizer_.params());  // Inf/NaN in any gradient
  const torch::Tensor norm = optimizer_.grad_norm();
  found_inf = found_inf.defined() ? torch::maximum(found_inf, nonfinite_flag(loss, norm)) : nonfinite_flag(loss, norm);
  if (cfg_.training.grad_clip_norm > 0) optimizer_.clip_grad_norm(norm, cfg_.training.grad_clip_norm);
  optimizer_.step(found_inf);
  if (scaler_) scaler_->update(found_inf);
  if (!buffers_.empty()) {  // a skipped step leaves batch-norm statistics as they were, too
    torch::NoGradGuard no_grad;
    const torch::Tensor skip = found_inf > 0;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(torch::where(skip, saved_buffers_[i], buffers_[i]));
  }
  return {loss.detach(), found_inf};
}

torch::Tensor TrainStep::run(const Batch& batch) {
  std::optional<StepOutputs> out;
  replayed_ = false;
  if (graph_) {
    out = graph_->run(batch);
    if (out) {
      replayed_ = graph_->captured();
      out->loss = out->loss.clone();  // the graph's output is overwritten by the next replay
      out->found_inf = out->found_inf.clone();
    } else {
      features_.cuda_graph = false;
      features_.cuda_graph_note = graph_->fallback_reason();
      graph_.reset();
    }
  }
  if (!out) out = compute(batch, /*capturing=*/false);
  if (monitor_) monitor_->record(out->loss, out->found_inf);
  last_found_inf_ = out->found_inf;
  return out->loss;
}

}  // namespace u3d
