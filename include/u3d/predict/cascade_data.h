// nnU-Net's 3d_cascade_fullres input (its second stage): the full-resolution dataset with the first
// stage's (3d_lowres) segmentation added as one 0/1 input channel per foreground class, so the
// second stage trains and predicts like any other run (`trainer cascade`, docs/segmentation.md).
//
//   trainer --config liver_lowres.yaml --set data.folds=5 --fold all          # out-of-fold val predictions
//   trainer --config liver_lowres.yaml --set data.folds=5 --fold all --predict-only --set predict.split=test
//   trainer cascade --previous runs/liver_lowres --data data/liver.h5 --out data/liver_cascade.h5
//   trainer --config liver_cascade.yaml --set data.folds=5 --fold all
//
// Where each case's first-stage segmentation comes from (as nnU-Net, which trains the second stage
// on the first stage's cross-validation predictions):
//   - a case of the first stage's cross-validation pool (folds.json): the fold that held it out,
//     <previous>/fold_K/predictions/val.h5, never a model that saw it in training;
//   - any other case (e.g. the test split): <previous>/ensemble/predictions/<split>.h5 (the fold
//     ensemble) or <previous>/predictions/<split>.h5.
// The first stage's grid is coarser: its probabilities (predict.probabilities), else the one-hot of
// its labels, are resampled trilinearly (align_corners false, as the importer's --spacing) to the
// full-resolution case's shape and arg-maxed, as nnU-Net resamples them for the next stage.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

struct CascadeDataOptions {
  std::filesystem::path previous;  // the first stage's experiment folder (runs/<name>_lowres)
  std::filesystem::path data;      // the full-resolution dataset (segmentation)
  std::filesystem::path out;       // the second stage's dataset, written atomically
  int64_t threads = 0;             // 0: every core
};

struct CascadeDataSummary {
  int64_t cases = 0;
  int64_t out_of_fold = 0;                  // from fold_K/predictions/val.h5
  int64_t other = 0;                        // from an ensemble's or the run's predictions/<split>.h5
  std::vector<std::string> added_channels;  // "previous_<class>", one per foreground class
};

// Writes `out`: every case of `data` with its image channels followed by the added channels (uint8
// 0/1 stored as the image's float32), its target, mask, spacing and source geometry, the same splits
// and classes; channel_normalization the file's (when it records one) followed by "none".
// ConfigError (exit 2) for a previous folder without folds.json (a first stage trained without
// cross-validation would hand the second stage in-sample predictions) or a case no predictions file
// holds (naming it and the command that predicts it); DataError for a first stage with other classes.
CascadeDataSummary make_cascade_dataset(const CascadeDataOptions& o);

// (K - 1, D, H, W) uint8: the one-hot foreground classes of a first-stage prediction resampled to
// `shape`. `scores`: (K, d, h, w) float32 probabilities or one-hot labels.
torch::Tensor previous_stage_channels(const torch::Tensor& scores, const Shape3& shape);

}  // namespace u3d
