// Mixed-precision training: a dynamic loss scaler for fp16 whose whole state stays on the device.
// The autocast scope and the precision resolution are in model/autocast.h (prediction uses them too).
//
//   GradScaler scaler(device);                               // fp16 only
//   (loss * scaler.scale()).backward();
//   torch::Tensor found_inf = scaler.unscale_(grads);        // () float32 0/1, no host read
//   optimizer.step(found_inf);
//   scaler.update(found_inf);                                // back off on Inf/NaN, grow every 2000 steps
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/model/autocast.h"

namespace u3d {

// Dynamic loss scaling (torch.amp.GradScaler's algorithm) with the scale (float32) and growth
// tracker (int32) as device tensors: unscale_ and update are ATen's _amp_ kernels (CPU and CUDA),
// so a step with loss scaling reads nothing back and can be captured in a CUDA graph.
class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;  // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;  // steps without Inf/NaN before the scale grows
  };
  explicit GradScaler(const torch::Device& device) : GradScaler(device, Options{}) {}
  GradScaler(const torch::Device& device, Options options);

  // () float32 on the device; multiply the loss by it before backward.
  const torch::Tensor& scale() const { return scale_; }
  // Divides every gradient in place by the scale and returns found_inf: () float32, 1 when any
  // gradient holds Inf or NaN (the step must be skipped), else 0. Undefined gradients are ignored.
  // Gradients must be float32 or float16 on the scaler's device.
  torch::Tensor unscale_(const std::vector<torch::Tensor>& params);
  // After the step: found_inf == 1 multiplies the scale by backoff_factor and resets the tracker;
  // growth_interval clean steps in a row multiply it by growth_factor. On the device, in place.
  void update(const torch::Tensor& found_inf);

  // Host reads (checkpoints, logs, tests).
  double scale_value() const;
  int64_t growth_tracker_value() const;
  // Restores a saved state (in place, so tensors captured in a CUDA graph stay valid).
  void load(double scale, int64_t growth_tracker);

 private:
  Options options_;
  torch::Tensor scale_;           // () float32
  torch::Tensor growth_tracker_;  // () int32
  torch::Tensor found_inf_;       // () float32, reused by unscale_
};

}  // namespace u3d
