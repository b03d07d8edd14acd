// The training run: fit() reads like nnU-Net's run_training, the loop calling collaborators with
// one job each:
//
//   resolve()         every dataset- and device-dependent setting checked before anything loads (resolve.h)
//   TrainData         caches, sampler and batch loader; reads the data (train_data.h); the loop asks
//                     the loader for batches only (loader.next, or its capturable source)
//   TrainStep         one optimizer step, eager or a replayed CUDA graph (train_step.h)
//   Validator         whole-volume and patch validation, the monitored value (validator.h)
//   StoppingRules     early stop and the time budget (stopping_rules.h)
//   DataParallel      the process group's decisions, buffers and barriers (data_parallel.h)
//   CheckpointKeeper  when and what to checkpoint, write failures (checkpoint_keeper.h)
//   RunLog            console lines and progress, metrics.csv, steps.csv (monitor/run_log.h)
//   GpuBusyClock      CUDA events around each step: the epoch's GPU busy share (gpu_busy.h)
//   FaultHooks        the tests' faults (fault_hooks.h); nothing in normal runs
//
//   Trainer trainer(cfg, TrainOptions{});
//   trainer.fit();   // check_run_folder -> setup_runtime -> load_data (resolve, caches; then
//                    // prepare_run: nothing is written before) -> build_model -> restore ->
//                    // record_run -> per epoch: train_epoch, validate, end_epoch (metrics row,
//                    // stopping rules, checkpoints)
//
// Stopping rules (StoppingRules): training.early_stop_patience epochs without an improvement of
// the monitored value, or a training.max_minutes budget the next epoch would overrun, end the run
// after an epoch, with its checkpoint; the count and the clock (TrainState::run_seconds) survive
// --resume, and a resume with nothing left to do says why and exits 0.
//
// Data-parallel (docs/distributed.md): under torchrun or srun (TrainOptions::launch) every rank runs
// fit(); setup_runtime() joins the c10d process group (Distributed), load_data() checks that config
// and data agree on every rank, build_model() broadcasts rank 0's weights and arms the bucketed
// gradient all-reduce (GradientSync); each rank draws its share of every global batch; losses and
// validation are reduced over the ranks; a stop signal on any rank stops all of them at the same
// step; rank 0 alone writes the run folder (checkpoints, logs, metrics), then every rank meets at a
// barrier.
//
// Reliability (docs/reliability.md): SIGINT/SIGTERM/SIGHUP end the run after the current step
// with a checkpoint (stop_signal() then names the signal; the process exits with 128 + signal);
// checkpoint.every_minutes adds checkpoints inside long epochs; a step whose loss or gradient norm
// is not finite is skipped on the device and counted, and training.max_nonfinite_steps skips in a
// row stop the run (TrainingError); out of memory stops it with the settings to change.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/core/faults.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/run.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"
#include "u3d/train/checkpoint_keeper.h"
#include "u3d/train/data_parallel.h"
#include "u3d/train/fault_hooks.h"
#include "u3d/train/gpu_busy.h"
#include "u3d/train/losses.h"
#include "u3d/train/optimizer.h"
#include "u3d/train/resolve.h"
#include "u3d/train/run_monitoring.h"
#include "u3d/train/schedule.h"
#include "u3d/train/step_monitor.h"
#include "u3d/train/stopping_rules.h"
#include "u3d/train/train_data.h"
#include "u3d/train/train_step.h"
#include "u3d/train/validator.h"

namespace u3d {

struct TrainOptions {
  // Unset: a fresh run (refused when the run folder already holds checkpoints).
  // "" : continue from the newest checkpoint of the run; else the checkpoint at that path.
  std::optional<std::string> resume;
  // Keys (or "section.*") a resume may change besides the runtime keys (resume.h).
  std::vector<std::string> allow_config_change;
  // Who started the process (launch_env()): a torchrun or srun rank joins the job's process group.
  LaunchEnv launch;
};

class Trainer {
 public:
  Trainer(Config cfg, TrainOptions options);
  ~Trainer();
  // Runs every stage; returns the state after the last epoch.
  TrainState fit();

  // Stages, public so tests can drive them one by one.
  void check_run_folder() const;  // read-only: refuses checkpoints of an earlier run without --resume
  void prepare_run();             // run folder, checkpoints/, train.log (load_data calls it; repeatable)
  void setup_runtime();
  void load_data();
  void build_model();
  void restore();
  void record_run();  // <run>/config.yaml, metrics.csv, the banner: only once every check passed
  EpochStats train_epoch(int64_t epoch);
  // One optimizer step on training.accumulate_steps micro-batches (on the device) through TrainStep
  // (train_step.h): forward under autocast, loss, backward per micro-batch; gradient norm, skip
  // flag, clipping, update once; eager or as a replayed CUDA graph; nothing is read back. Returns
  // the loss (device scalar). A stop signal is acted on between optimizer steps only, so a
  // checkpoint never holds a partly accumulated gradient.
  torch::Tensor train_step(const MicroBatches& micro);
  torch::Tensor train_step(const Batch& batch);  // training.accumulate_steps 1

  // The stop signal that ended fit() early, or 0.
  int stop_signal() const { return stop_signal_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  const TrainState& state() const { return state_; }
  const Config& config() const { return rc_.cfg; }  // resolved once load_data() ran
  NetworkImpl& network() { return *net_; }
  int64_t steps_per_epoch() const { return rc_.steps_per_epoch; }

 private:
  const Config& cfg() const { return rc_.cfg; }
  // Validator::run when due (else none); out of memory names the settings to change.
  std::optional<ValStats> validate(int64_t epoch);
  // The training position moves to the epoch boundary; the metrics row; the stopping rules (rank
  // 0's); the epoch's checkpoints. Whether the run stops here.
  bool end_epoch(int64_t epoch, const EpochStats& stats, const std::optional<ValStats>& val);
  // One optimizer step: its micro-batches from the loader (or the captured GPU sampler); adds the
  // time it waited for batches to `data_seconds`. Returns the loss (device scalar).
  torch::Tensor optimizer_step(int64_t epoch, int64_t step, double& data_seconds);
  // After a step: steps.csv, the non-finite check, a progress report when due.
  void after_step(int64_t epoch, const torch::Tensor& loss, EpochPosition at);
  // Once per process, after its first step: waits for it (one host read) and logs the time since the
  // process started (RunLog::first_step).
  void first_step_done(const torch::Tensor& loss);
  // The epoch's figures from the monitor's sums (a host read), after the non-finite check; the GPU
  // busy clock's sum and this process's times (`data_seconds`: waited here) in EpochStats::time.
  EpochStats epoch_stats(double carried_seconds, double data_seconds);
  // Samples per optimizer step, over every rank.
  int64_t global_batch() const { return cfg().data.batch_size * cfg().training.accumulate_steps * ranks_.world_size(); }
  // Inside a catch block: rethrows `e`, or, out of memory, a TrainingError with `out_of_memory`
  // (the settings to change) and the last checkpoint.
  [[noreturn]] void rethrow(const std::exception& e, const std::string& out_of_memory) const;
  TrainState finish();  // after the loop: the stop's checkpoint, or the end of the run
  CheckpointInfo checkpoint_info() const;
  void save_inside_epoch(int64_t epoch);
  // Stops the run (TrainingError) when training.max_nonfinite_steps steps in a row were skipped.
  void check_nonfinite();
  bool stopping();  // a stop signal arrived (records it); data-parallel: on any rank (a collective)

  TrainOptions options_;
  DataParallel ranks_;  // the process group and gradient all-reduce (one process: local answers)
  ResolvedConfig rc_;   // the config alone until load_data() resolves it
  RunPaths paths_;
  CheckpointKeeper keeper_;
  Runtime runtime_;
  std::unique_ptr<DatasetReader> reader_;
  std::unique_ptr<TrainData> data_;
  Network net_;
  std::unique_ptr<Loss> loss_;        // validation's (and the step's with one process)
  std::unique_ptr<Loss> train_loss_;  // data-parallel: masked-loss denominators averaged over the ranks
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<StepMonitor> monitor_;
  std::unique_ptr<GpuBusyClock> busy_;  // CUDA events around each step: the GPU busy share
  std::unique_ptr<TrainStep> step_;     // refers to net_, loss_, optimizer_, monitor_ (its destructor uses none)
  std::unique_ptr<Validator> validator_;
  std::unique_ptr<RunLog> log_;
  TrainState state_;
  torch::Tensor last_found_inf_;    // () float32: whether the last step was skipped
  bool first_step_done_ = false;    // RunLog::first_step was told
  bool sampling_in_graph_ = false;  // data.cache: gpu with a captured step: sampler inside the graph
  int stop_signal_ = 0;
  bool save_due_ = false;  // the wall-clock checkpoint cadence, as agreed with the stop signal
  StoppingRules rules_;    // reads rc_
  FaultHooks faults_;      // test-only fault injection (faults.h); nothing in normal runs
  std::chrono::steady_clock::time_point run_started_, epoch_started_;  // this process's clocks
  double carried_run_seconds_ = 0;  // TrainState::run_seconds of the processes before a resume
  double validation_seconds_ = 0;   // the last whole-volume validation's wall time (max_minutes)
  double checkpoint_seconds_ = 0;   // the last epoch-end checkpoint writes (the next epoch's wall time counts them)
};

}  // namespace u3d
