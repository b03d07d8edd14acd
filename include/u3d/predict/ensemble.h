// Fold ensembles for prediction (`trainer --predict-only --ensemble fold_0,...` or `--fold all`).
//
// EnsembleNetwork runs every member on each sliding-window batch and returns one output in the
// single-model format, so prediction streams exactly as for one model (predictor.h):
//   segmentation: log(mean_k softmax(member_k(x))), (N, K, D, H, W) float32: the softmax the output
//     sink takes of it is the members' mean probability, and for identical members it equals the
//     single model's softmax exactly (log-softmax shifts each voxel's logits by a constant);
//   sigmoid head (model.head): logit(mean_k sigmoid(member_k(x))), (N, K - 1, D, H, W) float32
//     (probabilities clamped to [1e-6, 1 - 1e-6]): the members' mean probability per channel;
//   regression:   mean_k member_k(x), (N, 1, D, H, W) float32, training units (target / target_scale).
// The members are registered as submodules "member<k>", so eval() and to() reach them.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "u3d/core/config.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/unet.h"

namespace u3d {

class EnsembleNetworkImpl : public NetworkImpl {
 public:
  // members: at least one (ConfigError otherwise), with the same input and output channels.
  EnsembleNetworkImpl(std::vector<Network> members, Task task, Head head = Head::kSoftmax);
  torch::Tensor forward(const torch::Tensor& x) override;
  // The least common multiple of the members' divisors.
  int64_t size_divisor() const override { return divisor_; }
  size_t size() const { return members_.size(); }

 private:
  std::vector<Network> members_;
  Task task_;
  Head head_;
  int64_t divisor_ = 1;
};
TORCH_MODULE(EnsembleNetwork);

}  // namespace u3d
