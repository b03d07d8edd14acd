// Data-parallel training over PyTorch's c10d: the process group of a torchrun or srun job
// (core/launch_env.h), and the few collectives the trainer needs. No communication code of ours:
// TCPStore for the rendezvous, ProcessGroupNCCL on CUDA, ProcessGroupGloo on CPU.
//
//   auto dist = Distributed::join(launch_env(), cfg.training, device);  // every rank, same order
//   dist->check_same("config", to_yaml(cfg));        // ConfigError on every rank, naming the ranks
//   dist->broadcast_parameters(net);                 // rank 0's weights and buffers, verified
//   GradientSync sync(params, *dist);                 // grad_sync.h: bucketed all-reduce in backward
//   dist->control_max({StopSignals::pending()})[0]   // a signal on any rank stops every rank
//
// Every call is a collective: all ranks make the same calls in the same order. A collective that
// fails (a rank crashed, or did not answer within training.dist_timeout_s) surfaces as
// DistributedError naming the ranks that are gone (describe_failure: each surviving rank marks
// itself in the store; the ranks that do not are named).
//
// Tensors handed to the collectives live on comm_device(): the rank's CUDA device with NCCL, the
// CPU with Gloo (Gloo also takes CUDA tensors). Host-side decisions, the config check, sums of
// validation values and barriers use a Gloo group on the CPU (the same group without NCCL), so
// they never synchronise the device.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/launch_env.h"
#include "u3d/train/losses.h"

namespace c10d {
class ProcessGroup;
}

namespace u3d {

class Distributed {
 public:
  // Connects to the job's store (torchrun's agent store, or rank 0's TCPStore under srun; prefix
  // /worker/attempt_<restart count>), checks every rank in and makes the process group:
  // training.dist_backend auto is NCCL on CUDA and Gloo on CPU (ConfigError for nccl on CPU). The
  // store and the roll call take at most training.dist_timeout_s; each way they fail (nothing at
  // MASTER_ADDR:MASTER_PORT, a program there that is not a store, ranks started with different
  // world sizes or twice as one rank, a rank that never joined) is one line (src/train/rendezvous.h).
  static std::unique_ptr<Distributed> join(const LaunchEnv& env, const TrainingConfig& cfg,
                                           const torch::Device& device);
  ~Distributed();

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }
  const LaunchEnv& env() const { return env_; }
  const std::string& backend_name() const { return backend_name_; }  // "nccl" or "gloo"
  const torch::Device& comm_device() const { return comm_device_; }
  // The c10d process group (for c10d::Reducer in tests).
  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const;

  // In place, over all ranks: the sum (or the maximum). `t` on comm_device().
  void all_reduce_(torch::Tensor& t, bool max = false);
  // The sum over the ranks of `t`, differentiable (torch.distributed.nn's all_reduce): the backward
  // pass sums the incoming gradients over the ranks too, so a loss of gathered sums, averaged by the
  // gradient all-reduce, gets the gradient one process with the global batch would.
  torch::Tensor sum_with_grad(const torch::Tensor& t);
  // A float64 vector summed over ranks (on the host).
  std::vector<double> sum(const std::vector<double>& values);
  // rank 0's tensors into every rank's, in place (any device; copied through comm_device()).
  void broadcast_(std::vector<torch::Tensor>& tensors);
  void barrier();  // host-side: every rank reached this point (device work may still run)
  // Waits on the host until the device has run the work queued so far on the current stream, for at
  // most training.dist_timeout_s; longer is a DistributedError naming the ranks gone. For host reads
  // after replayed CUDA graphs, whose NCCL collectives no watchdog times out (a crashed rank would
  // leave them waiting for ever). Nothing with Gloo (CPU tensors).
  void wait_for_device(const std::string& during);
  // The element-wise maximum of `local` over the ranks, on the host: step-boundary decisions (a stop
  // signal on any rank, rank 0's checkpoint clock) that never wait for the device (with NCCL they
  // go through a second, Gloo, group on the CPU).
  std::vector<int> control_max(const std::vector<int>& local);

  // ConfigError on every rank when `text` (a config, a dataset fingerprint) differs from rank 0's:
  // "<what> differs between ranks: rank 1 (and 3) differ from rank 0" plus `hint`.
  void check_same(const std::string& what, const std::string& text, const std::string& hint = "");
  // Broadcasts rank 0's parameters and buffers (no-grad), then verifies that every rank holds the
  // same shapes and values (ConfigError naming the ranks that differ).
  void broadcast_parameters(torch::nn::Module& module);

  // The message for a failed collective: which ranks did not check in within a few seconds
  // (crashed or hung), then `what` (our words; empty: nothing more).
  std::string describe_failure(const std::string& during, const std::string& what);
  // Throws DistributedError(describe_failure(during, "")) for a collective that threw: the
  // backend's own words (Gloo, NCCL) are logged at debug level only, never on the user's line.
  [[noreturn]] void fail(const std::string& during, const std::exception& e);

 private:
  Distributed() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  LaunchEnv env_;
  std::string backend_name_;
  torch::Device comm_device_ = torch::kCPU;
  double timeout_s_ = 600;
};

// `o` with rank_mean (the masked losses' denominators) and rank_sum (the topology losses' batch
// sums) over `dist`'s ranks: the loss of the data-parallel training step, never validation's.
LossOptions data_parallel_loss_options(LossOptions o, Distributed& dist);

}  // namespace u3d
