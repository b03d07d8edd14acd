#include "u3d/train/train_step.h"

#include <spdlog/spdlog.h>

#include <vector>

#include "u3d/core/errors.h"
#include "u3d/train/cuda_graph.h"
#include "u3d/train/distributed.h"
#include "u3d/train/grad_sync.h"

namespace u3d {

std::string StepFeatures::describe() const {
  std::vector<std::string> parts{precision_name(precision)};
  parts.push_back(channels_last ? "channels-last" : "contiguous");
  parts.push_back(cuda_graph ? "CUDA graph" : "eager");
  if (accumulate_steps > 1) parts.push_back(fmt::format("{} micro-batches per step", accumulate_steps));
  if (activation_checkpointing != Checkpointing::kOff) {
    parts.push_back(fmt::format("activation checkpointing ({})", to_string(activation_checkpointing)));
  }
  if (fused_kernels) parts.push_back("fused kernels");
  if (fused_optimizer) parts.push_back("fused optimizer");
  if (cudnn_benchmark) parts.push_back("cuDNN autotune");
  if (tf32) parts.push_back("TF32");
  return fmt::format("{}", fmt::join(parts, ", "));
}

void plant_value(torch::Tensor& t, double value) {
  torch::NoGradGuard no_grad;
  const std::vector<at::indexing::TensorIndex> first(static_cast<size_t>(t.dim()), at::indexing::TensorIndex(0));
  t.index_put_(first, value);
}

TrainStep::TrainStep(const Config& cfg, const torch::Device& device, NetworkImpl& net, const Loss& loss,
                     Optimizer& optimizer, StepMonitor* monitor)
    : cfg_(cfg), device_(device), net_(net), loss_(loss), optimizer_(optimizer), monitor_(monitor) {
  features_.precision = resolve_precision(cfg.training, network_norm(cfg.model), device);
  if (cfg.training.precision == Precision::kAuto) {
    spdlog::info("precision {}", precision_reason(cfg.training, network_norm(cfg.model), device));
  }
  features_.accumulate_steps = accumulate_ = cfg.training.accumulate_steps;
  features_.activation_checkpointing = cfg.model.activation_checkpointing;
  features_.channels_last = resolve_channels_last(cfg.model, device);
  features_.channels_last_note = channels_last_reason(cfg.model, device);
  const FusedKernelsChoice fused = resolve_fused_kernels(cfg.model, device);
  features_.fused_kernels = fused.on();
  features_.fused_kernels_note = fused.reason;
  fused_scope_.emplace(fused.families);
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
    throw ConfigError(
        fmt::format("training.cuda_graph: on needs a CUDA device, and training runs on {}; use auto "
                    "or off",
                    device.str()));
  }
  // Checkpointed stages with dropout read and set the generators' state on the host to redraw the
  // forward's masks (model/checkpointing.h): not inside a graph.
  const bool host_rng = cfg.model.activation_checkpointing != Checkpointing::kOff && cfg.model.dropout > 0;
  if (graph == Toggle::kOn && host_rng) {
    throw ConfigError(
        "training.cuda_graph: on cannot capture model.activation_checkpointing with model.dropout > 0 (the "
        "recomputation restores the random-number state on the host); set training.cuda_graph: auto or off, or "
        "model.dropout: 0");
  }
  if (graph == Toggle::kOff) {
    features_.cuda_graph_note = "off (training.cuda_graph)";
  } else if (!device.is_cuda()) {
    features_.cuda_graph_note = "not on CPU";
  } else if (host_rng) {
    features_.cuda_graph_note = "off: activation checkpointing with dropout restores the RNG state on the host";
  } else {
    features_.cuda_graph = true;
    graph_ = std::make_unique<CudaGraphStep>(
        [this](const MicroBatches& micro, bool capturing) { return compute(micro, capturing); },
        cfg.training.graph_warmup_steps, accumulate_,
        /*required=*/graph == Toggle::kOn);
  }
  spdlog::info("training step: {} (layout {}; fused kernels {}{})", features_.describe(), features_.channels_last_note,
               features_.fused_kernels_note,
               features_.cuda_graph_note.empty() ? "" : fmt::format("; CUDA graph {}", features_.cuda_graph_note));
}

TrainStep::~TrainStep() = default;

void TrainStep::set_after_backward(std::function<void(const std::vector<torch::Tensor>&)> hook) {
  after_backward_ = std::move(hook);
  if (after_backward_) {
    drop_graph("training.cuda_graph: on cannot be combined with test fault injection (U3D_TEST_FAULTS)",
               "off: test fault injection is active", "test fault injection is active; eager steps");
  }
}

void TrainStep::drop_graph(const std::string& refusal, const std::string& note, const std::string& why) {
  if (!graph_) return;
  if (cfg_.training.cuda_graph == Toggle::kOn) throw ConfigError(refusal);
  graph_.reset();
  source_ = nullptr;
  features_.cuda_graph = false;
  features_.sampling_in_graph = false;
  features_.cuda_graph_note = note;
  spdlog::info("training step: CUDA graph off: {}", why);
}

void TrainStep::set_data_parallel(GradientSync* sync, Distributed* dist) {
  sync_ = sync;
  dist_ = dist;
  if (!graph_) return;
  if (cfg_.training.cuda_graph != Toggle::kOn) {
    drop_graph("", "off: data-parallel steps are eager under auto (set training.cuda_graph: on to capture them)",
               "data-parallel steps are eager under training.cuda_graph: auto (on captures them with the NCCL "
               "all-reduces)");
    return;
  }
  if (dist->backend_name() != "nccl") {
    throw ConfigError(fmt::format(
        "training.cuda_graph: on with data-parallel training needs training.dist_backend nccl, and this run uses {} "
        "(its collectives run on the host, outside any graph); use nccl, or training.cuda_graph: auto or off",
        dist->backend_name()));
  }
  spdlog::info(
      "training step: data-parallel with a CUDA graph: every rank captures the same step, NCCL all-reduces "
      "included, after {} warm-up steps",
      cfg_.training.graph_warmup_steps);
}

LossParts TrainStep::accumulate(const Batch& batch, bool capturing) {
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
  LossParts parts;
  if (deep) {
    if (deep_weights_.size() != outs.size())
      deep_weights_ = deep_supervision_weights(static_cast<int64_t>(outs.size()));
    parts = deep_supervision_parts(loss_, outs, batch.target, deep_weights_, batch.maps);
  } else {
    parts = loss_.parts(outs[0], batch.target, batch.mask, batch.maps);
  }
  torch::Tensor loss = parts.total;
  if (accumulate_ > 1) {
    loss = loss / static_cast<double>(accumulate_);
    if (parts.terms.defined()) parts.terms = parts.terms / static_cast<double>(accumulate_);
  }
  if (sync_) sync_->arm(/*reduce=*/micro_index_ == accumulate_ - 1);  // the last micro-batch's backward reduces
  if (scaler_) {
    (loss * scaler_->scale()).backward();
  } else {
    loss.backward();
  }
  return {loss.detach(), parts.terms};
}

StepOutputs TrainStep::compute(const MicroBatches& micro, bool capturing) {
  if (!buffers_.empty()) torch::_foreach_copy_(saved_buffers_, buffers_);
  // Gradients set to none: the first backward writes them (under capture, from the graph's pool),
  // later micro-batches add. Data-parallel gradients are views into the all-reduce buckets: zeroed.
  optimizer_.zero_grad(/*set_to_none=*/sync_ == nullptr);
  micro_index_ = 0;
  LossParts first = accumulate(micro(0), capturing);
  torch::Tensor loss = first.total, terms = first.terms;
  for (int64_t m = 1; m < accumulate_; ++m) {
    micro_index_ = m;
    const LossParts next = accumulate(micro(m), capturing);
    loss = loss + next.total;
    if (terms.defined()) terms = terms + next.terms;
  }
  if (sync_) {
    sync_->finish();  // the averaged gradients, the same on every rank
    // The global batch's loss: the mean over ranks (one small all-reduce; on the device with NCCL).
    torch::Tensor both = terms.defined() ? torch::cat({loss.view({1}), terms}) : loss.view({1});
    both = both.to(dist_->comm_device()).contiguous();
    dist_->all_reduce_(both);
    both = (both / static_cast<double>(dist_->world_size())).to(loss.device());
    loss = both[0];
    if (terms.defined()) terms = both.slice(0, 1);
  }
  if (!sync_) optimizer_.fill_missing_grads();  // a parameter no backward reached: zeros
  if (after_backward_) after_backward_(optimizer_.params());
  torch::Tensor found_inf;
  if (scaler_) found_inf = scaler_->unscale_(optimizer_.params());  // Inf/NaN in any gradient
  // The gradient norm only where clipping needs it (or a test plants an Inf gradient with no scaler
  // to see it); otherwise the flag is the loss's (and the scaler's, over every gradient).
  const bool clip = cfg_.training.grad_clip_norm > 0;
  torch::Tensor norm;
  if (clip || (after_backward_ && !scaler_)) norm = optimizer_.grad_norm();
  const torch::Tensor flag = norm.defined() ? nonfinite_flag(loss, norm) : nonfinite_flag(loss);
  found_inf = found_inf.defined() ? torch::maximum(found_inf, flag) : flag;
  if (clip) optimizer_.clip_grad_norm(norm, cfg_.training.grad_clip_norm);
  optimizer_.step(found_inf);
  if (scaler_) scaler_->update(found_inf);
  if (!buffers_.empty()) {  // a skipped step leaves batch-norm statistics as they were, too
    torch::NoGradGuard no_grad;
    const torch::Tensor skip = found_inf > 0;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(torch::where(skip, saved_buffers_[i], buffers_[i]));
  }
  if (monitor_) monitor_->record(loss, found_inf, terms);  // in place: captured with the step
  return {loss, found_inf};
}

bool TrainStep::set_batch_source(std::function<Batch()> source) {
  if (!graph_ || graph_->warmup_done() > 0 || after_backward_) return false;
  source_ = std::move(source);
  features_.sampling_in_graph = static_cast<bool>(source_);
  if (source_) spdlog::info("training step: the GPU sampler is captured in the step's CUDA graph");
  return features_.sampling_in_graph;
}

torch::Tensor TrainStep::run_sampled() {
  if (!source_) throw std::logic_error("TrainStep::run_sampled needs set_batch_source()");
  const StepOutputs out = graph_->run_sampled(source_);
  replayed_ = graph_->captured();
  last_found_inf_ = out.found_inf;
  return out.loss;
}

torch::Tensor TrainStep::run(const Batch& batch) {
  if (accumulate_ != 1) {
    throw std::logic_error("TrainStep::run(batch) with training.accumulate_steps > 1; use run(micro)");
  }
  return run([&batch](int64_t) { return batch; });
}

torch::Tensor TrainStep::run(const MicroBatches& micro) {
  std::optional<StepOutputs> out;
  replayed_ = false;
  if (source_) throw std::logic_error("TrainStep::run(batch) after set_batch_source(); use run_sampled()");
  if (graph_) {
    out = graph_->run(micro);
    if (out) {
      replayed_ = graph_->captured();
    } else {
      features_.cuda_graph = false;
      features_.cuda_graph_note = graph_->fallback_reason();
      graph_.reset();
    }
  }
  if (!out) out = compute(micro, /*capturing=*/false);
  last_found_inf_ = out->found_inf;
  return out->loss;
}

}  // namespace u3d
