// `trainer predict -i IN -o OUT --run RUN_DIR` (or --model EXPORT_DIR, predict/exported_model.h): raw NIfTI images
// predicted as nnUNetv2_predict does, with no dataset import and no training config: the cases (predict/raw_cases.h)
// are imported into a scratch dataset beside OUT (the run's channels and classes, resampled to the run's spacing when
// its data was), predicted with prediction's library verb (resolve_prediction.h, prediction_run.h) and the NIfTI files,
// each with its input's header, moved into OUT, which is staged and renamed into place whole: a failure or a stop
// leaves no OUT and no partial one.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "u3d/app/commands.h"
#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/run.h"
#include "u3d/core/signals.h"
#include "u3d/core/staged_folder.h"
#include "u3d/core/text.h"
#include "u3d/io/dataset.h"
#include "u3d/io/import.h"
#include "u3d/predict/exported_model.h"
#include "u3d/predict/prediction_run.h"
#include "u3d/predict/raw_cases.h"
#include "u3d/predict/resolve_prediction.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// The run folders of --run and --fold: a run (it holds checkpoints/), or a cross-validation
// experiment whose fold_K runs are all used (nnU-Net's default) or the one --fold names.
std::vector<fs::path> member_runs(const PredictFilesCommand& cmd) {
  const fs::path dir(cmd.run);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("--run {}: no such folder", cmd.run));
  if (fs::is_directory(dir / "checkpoints", ec)) {
    if (!cmd.fold.empty()) {
      throw UsageError(
          fmt::format("--fold {}: {} is one run (it holds checkpoints/); --fold picks among the fold_K "
                      "runs of a cross-validation experiment folder",
                      cmd.fold, cmd.run));
    }
    return {dir};
  }
  std::vector<std::pair<int64_t, fs::path>> folds;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto k = name.rfind("fold_", 0) == 0 ? parse_int(name.substr(5)) : std::nullopt;
    if (k && fs::is_directory(e.path() / "checkpoints", ec)) folds.emplace_back(*k, e.path());
  }
  std::sort(folds.begin(), folds.end());
  if (folds.empty()) {
    throw UsageError(
        fmt::format("--run {}: neither a run folder (checkpoints/) nor an experiment of fold_K runs", cmd.run));
  }
  std::vector<fs::path> runs;
  for (const auto& [k, path] : folds) {
    if (cmd.fold.empty() || cmd.fold == "all" || cmd.fold == std::to_string(k)) runs.push_back(path);
  }
  if (runs.empty()) {
    std::vector<int64_t> have;
    for (const auto& f : folds) have.push_back(f.first);
    throw UsageError(fmt::format("--fold {}: {} has the folds {} (or all)", cmd.fold, cmd.run, fmt::join(have, ", ")));
  }
  return runs;
}

// The voxel size the run's data was resampled to at import (its first training case's spacing
// when that case's grid differs from its source file's); nullopt when it was not resampled, or
// its dataset cannot be read (then each image is predicted on its own grid, with a warning).
std::optional<std::array<double, 3>> training_spacing(const Config& trained) {
  try {
    const DatasetReader reader(trained.data.path);
    const auto& train = reader.split(trained.data.train_split);
    if (train.empty()) return std::nullopt;
    const auto source = reader.read_source(train.front());
    if (!source || source->shape == reader.case_shape(train.front())) return std::nullopt;
    return reader.case_spacing(train.front());
  } catch (const std::exception& e) {
    spdlog::warn(
        "predict: the run's dataset {} cannot be read ({}): each image is predicted on its own grid, "
        "as if the run's data was imported without --spacing",
        trained.data.path, error_line(e));
    return std::nullopt;
  }
}

// The scratch folder's name for channel k of case c: the importer's <case>_<kkkk><ending>.
fs::path link_path(const fs::path& images, const RawCase& c, size_t k) {
  const std::string name = c.channels[k].filename().string();
  return images / fmt::format("{}_{:04d}{}", c.id, k, name.substr(name.find(".nii")));
}

// The scratch folder's images/: one link per input file, named as the importer reads channels.
void link_inputs(const std::vector<RawCase>& cases, const fs::path& images) {
  fs::create_directories(images);
  for (const auto& c : cases) {
    for (size_t k = 0; k < c.channels.size(); ++k)
      fs::create_symlink(fs::absolute(c.channels[k]), link_path(images, c, k));
  }
}

// The importer's message names the links; the user named the files they point to.
std::string with_input_names(std::string message, const std::vector<RawCase>& cases, const fs::path& images) {
  for (const auto& c : cases) {
    for (size_t k = 0; k < c.channels.size(); ++k) {
      const std::string link = link_path(images, c, k).string();
      for (size_t at = message.find(link); at != std::string::npos; at = message.find(link, at)) {
        message.replace(at, link.size(), c.channels[k].string());
        at += c.channels[k].string().size();
      }
    }
  }
  return message;
}

// An input inside OUT (or OUT itself) would be replaced with it: refused.
void refuse_out_over_inputs(const fs::path& out, const std::vector<fs::path>& inputs) {
  const fs::path o = fs::weakly_canonical(fs::absolute(out));
  for (const auto& in : inputs) {
    const fs::path i = fs::weakly_canonical(fs::absolute(in));
    const auto mismatch = std::mismatch(o.begin(), o.end(), i.begin(), i.end());
    if (mismatch.first == o.end()) {
      throw UsageError(
          fmt::format("predict: -o {} holds the input {}; write the predictions elsewhere", out.string(), in.string()));
    }
  }
}

// A case the preflight skipped (written to <split>_skipped.csv) fails the command: OUT holds
// every case or none.
void refuse_skipped(const fs::path& skipped, const std::vector<RawCase>& cases) {
  std::error_code ec;
  if (!fs::exists(skipped, ec)) return;
  const auto rows = parse_csv(read_file(skipped));
  if (rows.size() < 2 || rows[1].fields.size() < 3) throw DataError("predict: a case has errors; nothing written");
  const std::string& id = rows[1].fields[0];
  std::string file = id;
  for (const auto& c : cases) {
    if (c.id == id) file = c.channels.front().string();
  }
  throw DataError(fmt::format("{}: {}: {} ({} of {} case(s) unusable; nothing written)", file, rows[1].fields[1],
                              rows[1].fields[2], rows.size() - 1, cases.size()));
}

// Raises the console's level to warn for the scratch import and prediction (their lines name
// scratch files), unless the user asked for debug.
class QuietScope {
 public:
  QuietScope() : level_(spdlog::get_level()) {
    if (level_ > spdlog::level::debug) spdlog::set_level(std::max(level_, spdlog::level::warn));
  }
  ~QuietScope() { spdlog::set_level(level_); }
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;

 private:
  spdlog::level::level_enum level_;
};

}  // namespace

int predict_files_command(const PredictFilesCommand& cmd) {
  if (cmd.out.empty()) throw UsageError("predict: -i needs -o OUT_DIR, the folder the predictions go to");
  if (cmd.run.empty() == cmd.model.empty()) {
    throw UsageError(
        "predict: -i needs --run RUN_DIR (a trained run or experiment) or --model DIR (a folder of "
        "trainer export), one of them");
  }
  if (!cmd.model.empty() && (!cmd.fold.empty() || cmd.checkpoint != "best")) {
    throw UsageError("predict: --fold and --checkpoint choose among a run's checkpoints; --model is one model");
  }
  fs::path out(cmd.out);
  if (out.filename().empty()) out = out.parent_path();  // "preds/" is the folder "preds"
  const StagedFolder scratch(out.parent_path() / ("." + out.filename().string() + ".work"));
  std::vector<PredictionMember> members;
  if (!cmd.model.empty()) members.push_back(member_from_export(cmd.model, scratch.path() / "checkpoints"));
  for (const auto& run : cmd.model.empty() ? member_runs(cmd) : std::vector<fs::path>{}) {
    members.push_back(read_prediction_member(run / "checkpoints", /*keep_last=*/0, cmd.checkpoint));
  }
  const PredictionMember& first = members.front();
  if (first.info.task != "segmentation") {
    throw ConfigError(
        fmt::format("predict -i: {} is a {} run; raw NIfTI files are predicted with segmentation runs "
                    "(import the data and use trainer predict -c CONFIG)",
                    first.checkpoint.string(), first.info.task));
  }
  const std::vector<fs::path> inputs(cmd.inputs.begin(), cmd.inputs.end());
  const std::vector<RawCase> cases = find_raw_cases(inputs, first.info.in_channels);
  refuse_out_over_inputs(out, inputs);
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)) && !cmd.force) {
    throw UsageError(fmt::format("predict: -o {} exists and is not empty; --force replaces it", cmd.out));
  }

  // The prediction's config: the first member's, on the scratch dataset's cases.
  Config cfg = first.trained;
  if (!cmd.device.empty()) apply_override(cfg, "training.device=" + cmd.device);
  cfg.predict.split = "test";
  cfg.predict.nifti = true;
  cfg.predict.probabilities = false;
  cfg.data.val_split = "val";
  NiftiFolders folders;
  for (int64_t k = 0; k < first.info.in_channels; ++k) folders.channel_suffixes.push_back(fmt::format("_{:04d}", k));
  folders.channel_names = first.trained.data.channels;  // data.channels' names, or the importer's
  folders.class_names.push_back("background");
  for (int64_t k = 1; k < first.info.out_channels; ++k) folders.class_names.push_back(fmt::format("class_{}", k));
  NiftiImportOptions io;
  io.spacing = training_spacing(first.trained);
  io.normalization = {"none"};  // the checkpoint's data.normalize applies
  io.compression_level = 1;

  spdlog::info("predict: {} case(s) of {} channel(s) with {} model(s) of {}{}", cases.size(), first.info.in_channels,
               members.size(), cmd.model.empty() ? cmd.run : cmd.model,
               io.spacing ? fmt::format(", resampled to the run's {} x {} x {} mm", (*io.spacing)[2], (*io.spacing)[1],
                                        (*io.spacing)[0])
                          : std::string());
  const StopSignals signals;  // a stop between cases removes everything staged
  StagedFolder staged(out);
  {
    const QuietScope quiet;
    folders.images = scratch.path() / "images";
    link_inputs(cases, folders.images);
    cfg.data.path = (scratch.path() / "input.h5").string();
    try {
      import_nifti_folders(folders, cfg.data.path, io);
    } catch (const DataError& e) {
      throw DataError(with_input_names(e.what(), cases, folders.images));
    } catch (const IoError& e) {
      throw IoError(with_input_names(e.what(), cases, folders.images));
    }
    const Runtime rt = init_runtime(cfg);
    const DatasetReader reader(cfg.data.path);
    const ResolvedPrediction rp = resolve_prediction(cfg, members, reader, rt.device);
    predict_split(rp, reader, scratch.path() / "predictions", rt);
  }
  refuse_skipped(scratch.path() / "predictions" / "test_skipped.csv", cases);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(scratch.path() / "predictions" / "test")) {
    names.push_back(e.path().filename().string());
    fs::rename(e.path(), staged.path() / names.back());
  }
  staged.commit();
  std::sort(names.begin(), names.end());
  if (names.size() > 3) names.resize(3), names.push_back("...");
  std::vector<std::string> checkpoints;
  for (const auto& m : members) checkpoints.push_back(m.checkpoint.string());
  spdlog::info("predict: wrote {} case(s) into {} ({}) with the inputs' geometry; checkpoint{}: {}", cases.size(),
               out.string(), fmt::join(names, ", "), members.size() > 1 ? "s (ensemble)" : "",
               fmt::join(checkpoints, ", "));
  return kExitOk;
}

}  // namespace u3d
