// k-fold cross-validation (data.folds, experiment.fold), as nnU-Net's splits_final.json.
//
//   data.folds: 5, experiment.fold: 2   ->  runs/<name>/fold_2 trains on folds 0, 1, 3, 4
//                                           and validates on fold 2
//
// The pool is every case of data.train_split and data.val_split (when the file has it), sorted; the
// folds deal a seeded shuffle of it round-robin, so they depend only on (case ids, k,
// experiment.seed). They are written once to <output_dir>/<name>/folds.json and read back from
// there by every fold, resume and prediction, so they never change under the user: a file whose
// cases or fold count no longer match the data is refused (ConfigError) rather than silently
// re-split.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

class DatasetReader;

struct FoldSplit {
  std::vector<std::string> train;  // every other fold's cases, sorted
  std::vector<std::string> val;    // this fold's cases, sorted
};

// Deterministic k-fold partition of `ids` (any order; duplicates removed): every id is in exactly
// one fold's val; fold sizes differ by at most one. ConfigError when there are fewer ids than folds.
std::vector<FoldSplit> make_folds(std::vector<std::string> ids, int64_t k, uint64_t seed);

// JSON as nnU-Net's splits_final.json: [{"train": [...], "val": [...]}, ...].
std::string folds_json(const std::vector<FoldSplit>& folds);
// Parses folds_json's text; DataError naming `where` for anything else.
std::vector<FoldSplit> folds_from_json(const std::string& text, const std::string& where);

// <output_dir>/<name>/folds.json (beside the fold_K run folders).
std::filesystem::path folds_file(const Config& cfg);
// The cross-validation pool of `cfg`: data.train_split's cases and data.val_split's (when the file
// has that split), sorted, without duplicates.
std::vector<std::string> fold_pool(const DatasetReader& reader, const Config& cfg);
// The folds of cfg's cross-validation: folds_file(cfg) when it exists (ConfigError when it lists
// other cases than the pool or another fold count), else make_folds(pool, data.folds, seed).
std::vector<FoldSplit> load_folds(const DatasetReader& reader, const Config& cfg);
// load_folds, and writes folds_file(cfg) (atomically) when it does not exist yet.
std::vector<FoldSplit> load_or_save_folds(const DatasetReader& reader, const Config& cfg);

// `cfg` for fold `k` (experiment.fold = k): the config each fold of `--fold all` runs with.
Config config_for_fold(const Config& cfg, int64_t k);

}  // namespace u3d
