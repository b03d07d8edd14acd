// Validation after an epoch, and the value checkpoint.monitor watches.
//
// Whole volumes (training.val_full, every training.val_every epochs and after the last): each val
// case predicted by sliding window as prediction does (no mirroring), scored by the loss, the task
// metric (val_mae in target units, or val_dice), and for a dose dataset with DVH structures the
// OpenKBP dose and DVH scores (Gy) of its submission file. Patches (training.val_patch_batches):
// nnU-Net's pseudo-Dice every epoch and its EMA.
//
//   Validator validator(rc, data, reader, device, threads, net, loss, channels_last, faults, dist);
//   if (validator.due(epoch)) { ValStats v = validator.run(epoch, state, stopping); ... }
//
// Data-parallel (`dist`): rank r validates val cases r, r + W, ... and val patch batches r, r + W,
// ...; the sums behind every value (losses, metrics, OpenKBP scores, pseudo-Dice counts) are
// reduced over the ranks, so every rank returns the same ValStats (the preview is rank 0's).
// `stopping` is polled once per round of W cases on every rank (it is a collective there).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <memory>

#include "u3d/core/faults.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/unet.h"
#include "u3d/monitor/epoch_stats.h"
#include "u3d/train/losses.h"
#include "u3d/train/resolve.h"
#include "u3d/train/train_data.h"

namespace u3d {

class DoseEvaluator;
class Distributed;

class Validator {
 public:
  // Keeps references to everything given; reads the DVH structure masks of the val cases when dose
  // metrics are scored.
  Validator(const ResolvedConfig& rc, const TrainData& data, const DatasetReader& reader, const torch::Device& device,
            int64_t threads, NetworkImpl& net, const Loss& loss, bool channels_last, const TestFaults& faults,
            Distributed* dist = nullptr);
  ~Validator();

  // Called after each val case (whole volumes) with the cases done and their number, for the status
  // line; host-side only.
  void set_progress(std::function<void(int64_t done, int64_t total)> progress) { progress_ = std::move(progress); }
  // Whether anything is validated after `epoch`.
  bool due(int64_t epoch) const;
  // The validation due after `epoch`. Updates state.pseudo_dice_ema. `stopping` is polled between
  // val cases: when it turns true, returns at once with complete = false. Out of memory propagates.
  ValStats run(int64_t epoch, TrainState& state, const std::function<bool()>& stopping);
  // Whether `val` improves on the best so far (checkpoint.monitor); records it in `state` when it
  // does, warns when the monitored value is not finite (never taken as the best).
  bool improves(const ValStats& val, int64_t epoch, TrainState& state) const;

 private:
  // Sliding-window validation of the whole val volumes.
  ValStats full_volumes(int64_t epoch, const std::function<bool()>& stopping);
  // nnU-Net's pseudo-Dice: training.val_patch_batches batches of val patches (drawn like training
  // patches for `epoch`, without augmentation); true positives, false positives and false negatives
  // per foreground class summed over every patch, Dice per class, mean over the classes present.
  // Sets stats.pseudo_dice, updates the EMA in `state`, sets stats.pseudo_dice_ema, and fills
  // stats.loss with the mean patch loss when it has no value yet.
  void patches(int64_t epoch, ValStats& stats, TrainState& state);
  double monitored(const ValStats& val) const;

  const ResolvedConfig& rc_;
  const TrainData& data_;
  const DatasetReader& reader_;
  torch::Device device_;
  NetworkImpl& net_;
  const Loss& loss_;
  bool channels_last_;
  const TestFaults& faults_;
  Distributed* dist_;  // data-parallel: null for one process
  std::function<void(int64_t, int64_t)> progress_;
  std::unique_ptr<DoseEvaluator> dose_eval_;  // OpenKBP dose/DVH scores of the val split, or null
};

}  // namespace u3d
