// Every setting of a training run that depends on the dataset or the device, checked and derived
// in one place before anything loads or is written, so a config that cannot work fails in one line
// within a second instead of after a slow cache load. The trainer and its collaborators (TrainData,
// Validator, RunLog) read the resolved form; nothing downstream re-parses a spec.
//
//   const auto reader = open_dataset(cfg);                         // ConfigError naming data.path
//   const ResolvedConfig rc = resolve(cfg, reader->info(), runtime.device);
//
// Checks that need the loaded voxels stay where the voxels are: the cache placement against free
// memory (cache.h), foreground specs against each case (sampler.h), loss masks present (losses.h).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "u3d/core/config.h"
#include "u3d/data/preprocess.h"
#include "u3d/evaluate/dose_metrics.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/open_dataset.h"

namespace u3d {

struct ResolvedConfig {
  // The run's config with data.normalize's `dataset` entries replaced by the file's recorded specs
  // (what config.yaml and checkpoints carry).
  Config cfg;
  DatasetInfo info;
  // data.channels and data.normalize parsed once: the map from raw values to network inputs.
  std::shared_ptr<const Preprocessor> pre;
  std::vector<std::string> train_ids;  // data.train_split (or the fold's training cases), never empty
  std::vector<std::string> val_ids;    // data.val_split (or the fold's cases); empty: no validation
  std::string cases_sha256;            // of train_ids: the sampler fingerprint checkpoints carry
  // Optimizer steps: training.steps_per_epoch, or ceil(train cases / global batch), the global batch
  // being batch_size x accumulate_steps x world_size; with model.dims 2 ceil(the train cases' slices
  // along data.slice_axis / global batch).
  int64_t steps_per_epoch = 0;
  // Data-parallel (train/distributed.h): this process's rank and the number of processes; each
  // rank draws its share of every global batch (SamplerOptions::shard).
  int64_t rank = 0, world_size = 1;
  // OpenKBP dose and DVH scores at validation (dose task, data.dvh_structures resolved); empty: none.
  std::vector<DvhStructure> dvh_structures;
  TaskMetric metric;                    // the task's val_mae | val_dice
  Monitor monitor = Monitor::kValLoss;  // checkpoint.monitor with auto resolved
  std::string monitor_name;             // its metrics.csv column, e.g. "val_dose_score"
  bool monitor_higher_is_better = false;

  Task task() const { return info.task; }
  bool scores_dose() const { return !val_ids.empty() && !dvh_structures.empty(); }
  bool validates() const { return !val_ids.empty(); }
  // nnU-Net's pseudo-Dice on val patches every epoch (training.val_patch_batches > 0).
  bool validates_patches() const { return validates() && cfg.training.val_patch_batches > 0; }
  // Whole-volume validation after `epoch` (training.val_every, and after the last epoch).
  bool full_validation_due(int64_t epoch) const;
  // Whether the validation after `epoch` measures the monitored value (checkpoint.monitor): the
  // pseudo-Dice every epoch (training.val_patch_batches), the whole-volume values only when
  // full_validation_due(). Epochs that do not measure it neither improve it nor count against
  // training.early_stop_patience.
  bool monitor_measured(int64_t epoch) const;
};

// Every dataset- and device-dependent check of a training run (ConfigError naming the key), for
// rank `rank` of `world_size` data-parallel processes.
ResolvedConfig resolve(const Config& cfg, const DatasetReader& reader, const torch::Device& device, int64_t rank = 0,
                       int64_t world_size = 1);

}  // namespace u3d
