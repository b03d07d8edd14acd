// State a checkpoint carries beside the network, in a sub-archive of its own ("optimizer"): the
// optimizer (train/optimizer.h) implements it, so checkpoint reading and writing (model/checkpoint.h)
// need nothing of training.
#pragma once
#include <torch/torch.h>

namespace u3d {

class CheckpointedState {
 public:
  virtual ~CheckpointedState() = default;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  // CheckpointError when the archive does not fit (kind, shapes).
  virtual void load(torch::serialize::InputArchive& archive) = 0;
};

}  // namespace u3d
