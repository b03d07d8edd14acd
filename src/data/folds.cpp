#include "u3d/data/folds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/rng.h"
#include "u3d/core/text.h"
#include "u3d/io/h5/dataset.h"

namespace u3d {
namespace {

// fold[key] as a list of case ids; DataError naming `where` for anything else.
std::vector<std::string> string_list(const Json& fold, const char* key, const std::string& where) {
  const bool ok = fold.is_object() && fold.contains(key) && fold[key].is_array() &&
                  std::all_of(fold[key].begin(), fold[key].end(), [](const Json& id) { return id.is_string(); });
  if (!ok) throw DataError(fmt::format("{}: expected a list of case ids", where));
  return fold[key].get<std::vector<std::string>>();
}

// Each case in at most one fold's val, once; no fold trains on a case it holds out, or on a case
// no fold holds out (DataError naming `where`, the fold and the case).
void check_fold_lists(const std::vector<FoldSplit>& folds, const std::string& where) {
  std::map<std::string, size_t> val_fold;  // case -> the fold that holds it out
  for (size_t f = 0; f < folds.size(); ++f) {
    for (const auto& id : folds[f].val) {
      const auto [at, fresh] = val_fold.emplace(id, f);
      if (!fresh) {
        throw DataError(
            fmt::format("{}: case '{}' is held out by fold {} and again by fold {}; each case belongs "
                        "to one fold's val list",
                        where, id, at->second, f));
      }
    }
  }
  for (size_t f = 0; f < folds.size(); ++f) {
    if (folds[f].train.empty()) {  // else training refuses it as "the training split holds no cases"
      throw DataError(
          fmt::format("{}: fold {} has an empty train list; each fold trains on the cases the other "
                      "folds hold out",
                      where, f));
    }
    std::set<std::string> train;
    for (const auto& id : folds[f].train) {
      const auto at = val_fold.find(id);
      if (at != val_fold.end() && at->second == f) {
        throw DataError(
            fmt::format("{}: fold {} trains on case '{}' that it validates on; a fold's train and val "
                        "lists never overlap",
                        where, f, id));
      }
      if (at == val_fold.end()) {
        throw DataError(fmt::format("{}: fold {} trains on case '{}', which no fold's val list holds", where, f, id));
      }
      if (!train.insert(id).second) {
        throw DataError(fmt::format("{}: fold {} lists case '{}' twice in train", where, f, id));
      }
    }
  }
}

// The fold_K run folders beside `folds_file` (sorted), those that ran on its folds.
std::vector<std::string> fold_run_folders(const std::filesystem::path& folds_file) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(folds_file.parent_path(), ec)) {
    const auto name = e.path().filename().string();
    if (name.rfind("fold_", 0) == 0 && parse_int(name.substr(5)) && e.is_directory(ec)) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::vector<FoldSplit> make_folds(std::vector<std::string> ids, int64_t k, uint64_t seed) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (k < 2 || static_cast<int64_t>(ids.size()) < k) {
    throw ConfigError(fmt::format("data.folds: {} folds need at least {} cases; the pool has {}", k,
                                  std::max<int64_t>(k, 2), ids.size()));
  }
  Rng rng(seed, /*a=*/0xF01D5ull);
  for (size_t i = ids.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(ids[i - 1], ids[static_cast<size_t>(rng.uniform_int(static_cast<int64_t>(i)))]);
  }
  std::vector<FoldSplit> folds(static_cast<size_t>(k));
  for (size_t i = 0; i < ids.size(); ++i) folds[i % folds.size()].val.push_back(ids[i]);
  for (size_t f = 0; f < folds.size(); ++f) {
    std::sort(folds[f].val.begin(), folds[f].val.end());
    for (size_t g = 0; g < folds.size(); ++g) {
      if (g == f) continue;
      for (size_t i = g; i < ids.size(); i += folds.size()) folds[f].train.push_back(ids[i]);
    }
    std::sort(folds[f].train.begin(), folds[f].train.end());
  }
  return folds;
}

std::string folds_json(const std::vector<FoldSplit>& folds) {
  Json out = Json::array();
  for (const auto& f : folds) out.push_back({{"train", f.train}, {"val", f.val}});
  return json_file_text(out);
}

std::vector<FoldSplit> folds_from_json(const std::string& text, const std::string& where) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw DataError(fmt::format("{}: not a folds file: {}", where, e.what()));
  }
  if (!root.is_array() || root.size() < 2) {
    throw DataError(fmt::format(
        "{}: expected a list of at least 2 folds, each with \"train\" and \"val\" lists of case ids", where));
  }
  std::vector<FoldSplit> folds;
  for (size_t f = 0; f < root.size(); ++f) {
    const auto at = fmt::format("{}: fold {}", where, f);
    folds.push_back({string_list(root[f], "train", at + " train"), string_list(root[f], "val", at + " val")});
  }
  check_fold_lists(folds, where);
  return folds;
}

std::filesystem::path folds_file(const Config& cfg) {
  return std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name / "folds.json";
}

std::vector<std::string> fold_pool(const DatasetReader& reader, const Config& cfg) {
  std::vector<std::string> ids = reader.split(cfg.data.train_split);  // ConfigError naming the splits
  if (!cfg.data.val_split.empty() && reader.has_split(cfg.data.val_split)) {
    const auto& val = reader.split(cfg.data.val_split);
    ids.insert(ids.end(), val.begin(), val.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<FoldSplit> load_folds(const DatasetReader& reader, const Config& cfg) {
  const auto pool = fold_pool(reader, cfg);
  const auto file = folds_file(cfg);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    // Made only before the first fold runs: a fold that ran used the folds the file held, and folds
    // made again (another seed, other data) would mix two splits in one cross-validation.
    const auto runs = fold_run_folders(file);
    if (!runs.empty()) {
      throw ConfigError(fmt::format(
          "{}: missing, but {} of this cross-validation already ran on the folds it held; restore the file "
          "(the folds never change under a cross-validation's runs), or move the experiment's folder away to "
          "start a new one",
          file.string(), fmt::join(runs, ", ")));
    }
    return make_folds(pool, cfg.data.folds, static_cast<uint64_t>(cfg.experiment.seed));
  }
  auto folds = folds_from_json(read_file(file), file.string());
  std::set<std::string> listed;
  for (const auto& f : folds) listed.insert(f.val.begin(), f.val.end());
  const std::set<std::string> wanted(pool.begin(), pool.end());
  if (static_cast<int64_t>(folds.size()) != cfg.data.folds || listed != wanted) {
    throw ConfigError(fmt::format(
        "{}: holds {} folds of {} cases, but data.folds = {} and {} gives {} cases (splits '{}' + '{}'); the folds of "
        "a cross-validation never change under its runs: restore the data and data.folds, or move the "
        "experiment's folder away to start a new one",
        file.string(), folds.size(), listed.size(), cfg.data.folds, cfg.data.path, pool.size(), cfg.data.train_split,
        cfg.data.val_split));
  }
  return folds;
}

std::vector<FoldSplit> load_or_save_folds(const DatasetReader& reader, const Config& cfg) {
  auto folds = load_folds(reader, cfg);
  const auto file = folds_file(cfg);
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    ensure_writable_directory(file.parent_path());
    write_file_atomic(file, folds_json(folds));
  }
  return folds;
}

Config config_for_fold(const Config& cfg, int64_t k) {
  Config out = cfg;
  out.experiment.fold = std::to_string(k);
  return out;
}

}  // namespace u3d
