// One training step, as fast as the device allows and with no host read:
//
//   TrainStep step(cfg, device, *net, loss, optimizer, &monitor);   // after to_channels_last()
//   optimizer.set_lr(schedule.at(i));                                 // device LR, outside any graph
//   torch::Tensor loss = step.run(batch);                             // () float32 on the device
//
// What run() does (eager): restore point for buffers; gradients set to none (zeroed in place in
// data-parallel runs, whose gradients are all-reduce bucket views); forward under autocast
// (training.precision: bf16/fp16 convolutions, AutocastGuard); the loss in float32 (the output is
// cast back before the loss); backward (of loss x scale with fp16), which writes the gradients;
// fp16: unscale the gradients and flag Inf/NaN (GradScaler); found_inf = non-finite loss or (fp16)
// gradient; with clipping (training.grad_clip_norm) the global gradient norm, which also joins
// found_inf, and the clip; without clipping no norm is computed (a finite loss with a non-finite
// gradient then goes unflagged in fp32/bf16, as in PyTorch without a scaler; test fault injection
// keeps the norm); the fused optimizer step, skipped on the device when found_inf; fp16: scale
// update; buffers (batch-norm statistics) put back when skipped; the StepMonitor's device sums.
// Nothing is read back to the host.
//
// training.cuda_graph: after training.graph_warmup_steps eager steps on a side stream, the whole
// step above is captured once in a CUDA graph (CudaGraphStep, cuda_graph.h) and replayed for every
// later batch, which is first copied into the graph's static input tensors. `auto` stays eager and
// logs why on CPU, when batch shapes change, with test fault injection, or when the capture fails;
// `on` makes each of these an error.
//
// model.channels_last: weights (to_channels_last(), before the optimizer is made, so its moments
// share the layout) and each input batch in ChannelsLast3d, the layout cuDNN's fastest 3D kernels
// use. at::instance_norm (and group norm) would make their input contiguous, converting the layout
// twice per block and pass; the networks' instance and group norms keep NDHWC instead
// (model/channels_last_norm.h), so `auto` picks channels-last for every network on CUDA, until
// GPU measurements say otherwise (channels_last_reason() says why).
//
// training.accumulate_steps = N (gradient accumulation): one optimizer step runs N micro-batches
// (gradients set to none once; per micro-batch forward, loss / N, backward: the first writes the
// gradients, the later ones add to them in place),
// then the rest of the step above once, on the summed gradients: one unscale, one Inf/NaN decision
// (over every micro-batch's loss and the gradients), one clip, one update. run(micro) asks for the
// micro-batches in order, each once, only as the step reaches it, so the loader can keep making the
// next while the device computes this one. With a CUDA graph, the whole N-micro-batch step is one
// graph (static inputs for each micro-batch, or the GPU sampler called N times inside it).
// Batch norm sees each micro-batch alone (running statistics update N times per step); losses that
// average over the batch (masked losses, Dice over the batch) average per micro-batch, then over
// the N micro-batches. With N = 1 the step is exactly the one above.
//
// Data-parallel (set_data_parallel): the last micro-batch's backward launches the bucketed gradient
// all-reduce (GradientSync, grad_sync.h), finish() waits for the averaged gradients before the
// unscale, Inf/NaN check, clipping and update, so every rank takes the same decision; the loss (and
// its terms) are averaged over the ranks too, so the monitor, the skip flag and metrics.csv see the
// global batch's loss. training.cuda_graph: auto keeps data-parallel steps eager (graphs with NCCL
// are not measured yet); on captures the whole step, the NCCL all-reduces included, on every rank
// after the same warm-up steps (grad_sync.h), and is a ConfigError with Gloo (host collectives).
// Inside a replay no NCCL watchdog watches the collectives: the trainer bounds its device waits
// with Distributed::wait_for_device instead.
//
// The monitor's device sums are updated inside compute(), so a replayed graph updates them too; the
// loss and found_inf that run() returns are the step's own tensors (a replayed graph's static
// outputs): valid until the next run(), clone them to keep them longer.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "u3d/core/config.h"
#include "u3d/data/batch.h"
#include "u3d/model/fused_kernels.h"
#include "u3d/model/layout.h"
#include "u3d/model/unet.h"
#include "u3d/train/amp.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/step_io.h"
#include "u3d/train/step_monitor.h"

namespace u3d {

class CudaGraphStep;
class Distributed;
class GradientSync;

// What the step runs with, resolved for the device (for logs and the benchmark's JSON).
struct StepFeatures {
  Precision precision = Precision::kFp32;  // resolved: never kAuto
  int64_t accumulate_steps = 1;            // micro-batches per optimizer step
  Checkpointing activation_checkpointing = Checkpointing::kOff;
  bool channels_last = false;
  bool cuda_graph = false;         // requested and possible so far (a later fallback clears it)
  std::string cuda_graph_note;     // why not, when not
  bool sampling_in_graph = false;  // the GPU sampler is captured with the step (set_batch_source)
  std::string channels_last_note;  // channels_last_reason()
  bool fused_kernels = false;      // model.fused_kernels resolved (model/fused_kernels.h)
  std::string fused_kernels_note;  // why
  bool fused_optimizer = true;     // ATen fused AdamW/Adam/SGD kernels (always, optimizer.h)
  bool cudnn_benchmark = false;    // cuDNN autotuning (training.deterministic off, CUDA)
  bool tf32 = false;               // TF32 matmuls/convolutions allowed for fp32 (CUDA)
  std::string describe() const;    // "bf16, channels-last, CUDA graph, fused adamw, cuDNN autotune, TF32"
};

// Test fault injection: writes `value` into the first element of `t` in place, whatever its
// layout (index_put_; a channels-last tensor has no flat view).
void plant_value(torch::Tensor& t, double value);

class TrainStep {
 public:
  // `monitor` may be null (benchmark). `net`, `loss`, `optimizer` and `monitor` must outlive this.
  // ConfigError for fp16 or cuda_graph: on without CUDA.
  TrainStep(const Config& cfg, const torch::Device& device, NetworkImpl& net, const Loss& loss, Optimizer& optimizer,
            StepMonitor* monitor);
  ~TrainStep();

  // One optimizer step on `batch` (on the device, the configured shapes); training.accumulate_steps
  // must be 1. Returns the loss (a device scalar, valid until the next run(); found_inf() tells
  // whether the step was skipped). No host read.
  torch::Tensor run(const Batch& batch);
  // One optimizer step over accumulate_steps micro-batches, asked of `micro` in order, each once
  // (a captured graph that falls back to eager steps asks again: keep them until the step ends).
  // Returns the mean of the micro-batches' losses.
  torch::Tensor run(const MicroBatches& micro);
  // With a batch source (set_batch_source): one optimizer step on the source's next
  // accumulate_steps batches; with a captured graph, sampling and step are one replay.
  torch::Tensor run_sampled();
  // Makes the step draw its batches from `source` (device work only: DeviceSampler::next_batch), so
  // that a CUDA graph captures sampling and step together. Call before the first step; returns
  // false (and keeps run(batch) as the way) when the step is not captured (CPU, cuda_graph off,
  // fault injection).
  bool set_batch_source(std::function<Batch()> source);
  // The step itself on accumulate_steps micro-batches, eager (CudaGraphStep captures this).
  // `capturing`: inside a CUDA graph capture (autocast cache off).
  StepOutputs compute(const MicroBatches& micro, bool capturing);

  // () float32 on the device: 1 when the last step was skipped.
  const torch::Tensor& found_inf() const { return last_found_inf_; }
  const StepFeatures& features() const { return features_; }
  // The fp16 loss scaler, or null.
  GradScaler* scaler() { return scaler_.get(); }
  // Test-only fault hook, called after backward with the parameters (to plant an Inf gradient);
  // forces eager steps (a host callback cannot run inside a replayed graph).
  void set_after_backward(std::function<void(const std::vector<torch::Tensor>& params)> hook);
  // Data-parallel training: gradients averaged by `sync`, loss averaged over `dist`'s ranks. Eager
  // steps from here on with training.cuda_graph: auto; captured with on (NCCL only: ConfigError
  // with Gloo). Both must outlive this.
  void set_data_parallel(GradientSync* sync, Distributed* dist);
  // Whether the last run() replayed a captured graph.
  bool replayed() const { return replayed_; }

 private:
  const Config& cfg_;
  torch::Device device_;
  NetworkImpl& net_;
  const Loss& loss_;
  Optimizer& optimizer_;
  StepMonitor* monitor_;
  StepFeatures features_;
  std::optional<at::ScalarType> autocast_;
  std::unique_ptr<GradScaler> scaler_;
  std::optional<FusedKernelsScope> fused_scope_;        // model.fused_kernels for this step's life
  std::vector<torch::Tensor> buffers_, saved_buffers_;  // restored when a step is skipped
  std::vector<double> deep_weights_;                    // deep-supervision loss weights, finest output first
  int64_t accumulate_ = 1;                              // training.accumulate_steps
  int64_t micro_index_ = 0;                             // the micro-batch accumulate() runs

  // Forward and backward of one micro-batch; returns its loss / accumulate_steps and its loss terms
  // (the same scale), detached.
  LossParts accumulate(const Batch& batch, bool capturing);
  // Eager steps from here on: no graph, no captured sampler; `note` for features(), `why` logged.
  // ConfigError(refusal) with training.cuda_graph: on. Nothing when no graph was planned.
  void drop_graph(const std::string& refusal, const std::string& note, const std::string& why);
  torch::Tensor last_found_inf_;
  std::function<void(const std::vector<torch::Tensor>&)> after_backward_;
  std::unique_ptr<CudaGraphStep> graph_;
  std::function<Batch()> source_;
  bool replayed_ = false;
  GradientSync* sync_ = nullptr;  // data-parallel
  Distributed* dist_ = nullptr;
};

}  // namespace u3d
