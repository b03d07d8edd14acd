// The trainer's one door to data-parallel training (docs/distributed.md): the process group
// (distributed.h) and the bucketed gradient all-reduce (grad_sync.h) behind the few decisions the
// loop takes, the same calls with one process or many. Every call is made by every rank at the same
// point in the same order (a collective with ranks; the local answer, no communication, without).
//
//   DataParallel ranks;
//   ranks.join(launch, cfg.training, device);      // a torchrun/srun rank joins; else one process
//   if (ranks.rank0_decides(local_rule)) ...        // decisions that read a clock: rank 0's
//   ranks.sync_buffers(net); ranks.barrier();       // before validation / after rank 0's checkpoint
#pragma once
#include <torch/torch.h>

#include <memory>

#include "u3d/core/config.h"
#include "u3d/core/launch_env.h"
#include "u3d/train/distributed.h"
#include "u3d/train/grad_sync.h"

namespace u3d {

class DataParallel {
 public:
  DataParallel();
  ~DataParallel();

  // Joins the job's process group when `launch` was started by torchrun or srun; else one process.
  void join(const LaunchEnv& launch, const TrainingConfig& cfg, const torch::Device& device);
  // Arms the bucketed gradient all-reduce over `params` (with ranks; nothing with one process).
  void sync_gradients(std::vector<torch::Tensor> params);

  bool active() const { return dist_ != nullptr; }
  Distributed* dist() const { return dist_.get(); }  // null with one process
  GradientSync* gradients() const { return sync_.get(); }
  bool main() const { return !dist_ || dist_->is_main(); }  // this process writes the run folder
  int64_t rank() const { return dist_ ? dist_->rank() : 0; }
  int64_t world_size() const { return dist_ ? dist_->world_size() : 1; }

  // Rank 0's decision (one process: `local`).
  bool rank0_decides(bool local) const;
  // The step-boundary decisions in one collective: a stop signal on any rank, rank 0's checkpoint
  // clock (`save_due` of the main rank). Logs when another rank's signal stops this one.
  struct Agreed {
    int signal = 0;
    bool save_due = false;
  };
  Agreed agree(int signal, bool save_due) const;
  // Batch norm: rank 0's running statistics to every rank (each rank's differ after its own
  // batches), before validation and checkpoints.
  void sync_buffers(torch::nn::Module& net) const;
  void barrier() const;  // every rank waits until rank 0's checkpoint is written

 private:
  std::unique_ptr<Distributed> dist_;  // process group (null: one process)
  std::unique_ptr<GradientSync> sync_;
};

}  // namespace u3d
