#include "u3d/train/step_probe.h"

#include <torch/cuda.h>

#include "u3d/core/errors.h"
#include "u3d/data/batch.h"
#include "u3d/model/layout.h"
#include "u3d/model/unet.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/train_step.h"

namespace u3d {

void run_training_steps(const ModelConfig& model, int64_t in_ch, int64_t out_ch, const Shape3& patch, int64_t batch,
                        int64_t optimizer_states) {
  const torch::Device device(torch::kCUDA, 0);
  // The step as training runs it: bf16, eager (the caller turns cuDNN autotuning on).
  Config cfg;
  cfg.model = model;
  cfg.data.batch_size = batch;
  cfg.data.patch_size = patch;
  cfg.training.device = Device::kCuda;
  cfg.training.precision = Precision::kBf16;
  cfg.training.cuda_graph = Toggle::kOff;
  cfg.training.optimizer = optimizer_states == 1 ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
  const bool segmentation = out_ch > 1;
  if (model.deep_supervision && !segmentation) {  // as resolve.cpp refuses it for training
    throw ConfigError("model.deep_supervision: needs a segmentation dataset (labels to down-sample)");
  }
  const Loss loss(segmentation ? LossKind::kDiceCe : LossKind::kMaskedL1);
  torch::manual_seed(0);
  Network net = build_network(model, in_ch, out_ch);
  net->to(device);
  if (resolve_channels_last(model, device)) to_channels_last(*net);
  Optimizer optimizer(cfg.training, net->parameters());
  TrainStep step(cfg, device, *net, loss, optimizer, /*monitor=*/nullptr);
  const auto f32 = torch::TensorOptions().device(device);
  Batch b;
  b.image = torch::randn({batch, in_ch, patch[0], patch[1], patch[2]}, f32);
  if (segmentation) {
    b.target = torch::randint(0, out_ch, {batch, patch[0], patch[1], patch[2]}, f32.dtype(torch::kLong));
  } else {
    b.target = torch::rand({batch, 1, patch[0], patch[1], patch[2]}, f32);
    b.mask = torch::ones({batch, 1, patch[0], patch[1], patch[2]}, f32);
  }
  for (int64_t i = 0; i < 3; ++i) step.run(b);  // the first autotunes; then steady state, moments alive
  torch::cuda::synchronize();                   // the peak read after this includes every step
}

}  // namespace u3d
