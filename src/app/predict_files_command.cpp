// `trainer predict -i IN -o OUT --run RUN_DIR` (or --model EXPORT_DIR, predict/exported_model.h): raw NIfTI images
// predicted as nnUNetv2_predict does, with no dataset import and no training config: the cases (predict/raw_cases.h)
// are imported into a scratch dataset beside OUT (the run's channels and classes, resampled to the run's spacing when
// its data was), predicted with prediction's library verb (resolve_prediction.h, prediction_run.h) and the NIfTI files,
// each with its input's header, moved into OUT, which is staged and renamed into place whole: a failure or a stop
// leaves no OUT and no partial one.
//
// 2D images (.png files, .tif/.tiff for a 2D model, or folders of them) take the same way through
// `trainer import images` (io/images/image2d_import.h, unlabelled): slices grouped into cases by name, and
// each case written as OUT/<case>/<image stem>_mask.png per slice plus the stacked OUT/<case>.tif, as
// --predict-only writes them for image datasets (docs/slices.md). For a 3D model, .tif/.tiff files are
// volumes (trainer import tiff, io/import.h): OUT/<name>.tif each, uint8 labels.
//
// One folder of DICOM files (a planning system's export, any depth) is imported as `trainer import
// dicom` would (io/dicom/dicom_import.h, inputs only: no target read), with the run's task and its channel
// or class names as the structure map (or --structures): OUT/<patient>.dcm, an RT Dose (dose runs) or
// an RT Structure Set (segmentation runs) on each patient's image series (io/dicom/dicom_write.h).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "u3d/app/commands.h"
#include "u3d/app/dicom_command.h"
#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/run.h"
#include "u3d/core/signals.h"
#include "u3d/core/staged_folder.h"
#include "u3d/core/text.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/images/image2d_import.h"
#include "u3d/io/import.h"
#include "u3d/io/nifti/nifti.h"
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

// An input file and the scratch folder's link to it, the name the importer reads.
struct Link {
  fs::path link, file;
};

// NIfTI cases: channel k of case c as the importer's <case>_<kkkk><ending>.
std::vector<Link> nifti_links(const std::vector<RawCase>& cases, const fs::path& images) {
  std::vector<Link> links;
  for (const auto& c : cases) {
    for (size_t k = 0; k < c.channels.size(); ++k) {
      const std::string name = c.channels[k].filename().string();
      links.push_back({images / fmt::format("{}_{:04d}{}", c.id, k, name.substr(name.find(".nii"))), c.channels[k]});
    }
  }
  return links;
}

// What -i holds besides NIfTI: 2D images (PNG, and TIFF for a 2D model) stacked into cases of
// slices, or 3D TIFF volumes (for a 3D model), one case each.
enum class InputKind { kNifti, kSlices, kTiffVolumes, kDicom };

bool is_tiff_path(const fs::path& p) {
  const std::string ext = to_lower(p.extension().string());
  return ext == ".tif" || ext == ".tiff";
}

// The files of -i of `kind`, each linked under its own name: files named on the command line and the
// files of folders (one level deep; hidden files and masks, *_mask.*, left out; a folder holding NIfTI
// files is a NIfTI folder). Empty when no input is of that kind; UsageError for a missing file or
// when -i mixes kinds, DataError for two files of one name.
std::vector<Link> input_links(const std::vector<fs::path>& inputs, const fs::path& images, InputKind kind) {
  const auto wanted = [kind](const fs::path& p) {
    return kind == InputKind::kTiffVolumes ? is_tiff_path(p) : is_image2d_path(p);
  };
  const char* what = kind == InputKind::kTiffVolumes ? "TIFF volumes" : "2D images";
  std::vector<fs::path> files;
  bool other = false;
  std::error_code ec;
  for (const auto& in : inputs) {
    if (!fs::is_directory(in, ec)) {
      if (wanted(in) && !fs::exists(in, ec)) throw UsageError(fmt::format("-i {}: no such file", in.string()));
      if (wanted(in)) {
        files.push_back(in);
      } else {
        other = true;
      }
      continue;
    }
    std::vector<fs::path> found;
    bool nifti_folder = false;  // a folder of NIfTI files: its other files are left alone, as nnU-Net does
    for (const auto& e : fs::directory_iterator(in, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".", 0) == 0 || !e.is_regular_file(ec)) continue;
      if (is_image2d_path(e.path()) && e.path().stem().string().find("_mask") != std::string::npos) continue;
      nifti_folder = nifti_folder || is_nifti_path(e.path());
      if (wanted(e.path())) {
        found.push_back(e.path());
      } else if (is_image2d_path(e.path())) {
        other = true;
      }
    }
    if (nifti_folder && !found.empty()) {  // as the same files named on the command line
      throw UsageError(fmt::format("predict: -i {} holds NIfTI files and {} ({}, ...); predict them in two calls",
                                   in.string(), what, found.front().string()));
    }
    if (nifti_folder) {
      other = true;
    } else {
      files.insert(files.end(), found.begin(), found.end());
    }
  }
  if (files.empty()) return {};
  if (other) {
    throw UsageError(fmt::format("predict: -i mixes {} ({}, ...) and other files; predict them in two calls", what,
                                 files.front().string()));
  }
  std::sort(files.begin(), files.end());
  std::vector<Link> links;
  std::map<std::string, fs::path> seen;
  for (const auto& f : files) {
    const auto [it, added] = seen.emplace(f.stem().string(), f);
    if (!added) {
      throw DataError(fmt::format("{} and {}: two inputs named '{}'; cases and slices are told apart by name",
                                  it->second.string(), f.string(), it->first));
    }
    links.push_back({images / f.filename(), f});
  }
  return links;
}

void link_inputs(const std::vector<Link>& links) {
  for (const auto& l : links) {
    fs::create_directories(l.link.parent_path());
    fs::create_symlink(fs::absolute(l.file), l.link);
  }
}

// The importer's message names the links; the user named the files they point to.
std::string with_input_names(std::string message, const std::vector<Link>& links) {
  for (const auto& l : links) {
    const std::string link = l.link.string();
    for (size_t at = message.find(link); at != std::string::npos; at = message.find(link, at)) {
      message.replace(at, link.size(), l.file.string());
      at += l.file.string().size();
    }
  }
  return message;
}

// Whether `inner` is `outer` or lies inside it (both made absolute, links resolved).
bool lies_in(const fs::path& inner, const fs::path& outer) {
  const fs::path i = fs::weakly_canonical(fs::absolute(inner)), o = fs::weakly_canonical(fs::absolute(outer));
  return std::mismatch(o.begin(), o.end(), i.begin(), i.end()).first == o.end();
}

// OUT and the inputs never nest, for every input kind, checked before anything is written (the
// scratch folder beside OUT included): an input inside OUT (or OUT itself) would be replaced, and
// OUT inside an input folder would be read back as input by the next import of that folder (a
// DICOM export would train on its own predicted dose).
void refuse_out_over_inputs(const fs::path& out, const std::vector<fs::path>& inputs) {
  std::error_code ec;
  for (const auto& in : inputs) {
    if (lies_in(in, out)) {
      throw UsageError(
          fmt::format("predict: -o {} holds the input {}; write the predictions elsewhere", out.string(), in.string()));
    }
    if (fs::is_directory(in, ec) && lies_in(out, in)) {
      throw UsageError(
          fmt::format("predict: -o {} lies inside the input folder {}; the next import of that folder would read the "
                      "predictions as input: write them outside it",
                      out.string(), in.string()));
    }
  }
}

// A case the preflight skipped (written to <split>_skipped.csv) fails the command: OUT holds
// every case or none. The line names the case's first input file.
void refuse_skipped(const fs::path& skipped, const std::vector<Link>& links, size_t cases) {
  std::error_code ec;
  if (!fs::exists(skipped, ec)) return;
  const auto rows = parse_csv(read_file(skipped));
  if (rows.size() < 2 || rows[1].fields.size() < 3) throw DataError("predict: a case has errors; nothing written");
  const std::string& id = rows[1].fields[0];
  std::string file = id;
  for (const auto& l : links) {
    if (l.link.filename().string().rfind(id, 0) == 0) {
      file = l.file.string();
      break;
    }
  }
  throw DataError(fmt::format("{}: {}: {} ({} of {} case(s) unusable; nothing written)", file, rows[1].fields[1],
                              rows[1].fields[2], rows.size() - 1, cases));
}

// The NIfTI cases (linked in `images`) into the scratch dataset `path`: the run's channels and
// classes, resampled to `spacing` (the run's, when its data was resampled).
void import_nifti_cases(const PredictionMember& first, const std::optional<std::array<double, 3>>& spacing,
                        const fs::path& images, const std::string& path) {
  NiftiFolders folders;
  folders.images = images;
  for (int64_t k = 0; k < first.info.in_channels; ++k) folders.channel_suffixes.push_back(fmt::format("_{:04d}", k));
  folders.channel_names = first.trained.data.channels;  // data.channels' names, or the importer's
  folders.class_names.push_back("background");
  for (int64_t k = 1; k < first.info.out_channels; ++k) folders.class_names.push_back(fmt::format("class_{}", k));
  NiftiImportOptions io;
  io.spacing = spacing;
  io.normalization = {"none"};  // the checkpoint's data.normalize applies
  io.compression_level = 1;
  import_nifti_folders(folders, path, io);
}

// The 2D images (linked in `images`) into the scratch dataset `path` as `trainer import images`
// groups them (one case per patient name), unlabelled, with the run's classes; the number of cases.
int64_t import_image_cases(const PredictionMember& first, const fs::path& images, const std::string& path) {
  ImagesImportOptions io;
  io.images = images;
  io.unlabelled_classes = first.info.out_channels;
  io.val_fraction = 0;
  io.compression_level = 1;
  return import_images(io, path).test;
}

// The 3D TIFF volumes (linked in `images`) into the scratch dataset `path`, one unlabelled case per
// file, with the run's classes and its data's voxel size; the number of cases.
int64_t import_tiff_cases(const PredictionMember& first, const fs::path& images, const std::string& path) {
  TiffImportOptions io;
  io.images = images;
  io.classes = first.info.out_channels;
  io.compression_level = 1;
  return import_tiff(io, path).test;
}

// What -i names, sorted out: its kind, the scratch links to its files and, for NIfTI, its cases.
struct Inputs {
  InputKind kind = InputKind::kNifti;
  std::vector<Link> links;
  std::vector<RawCase> cases;  // kNifti only
  fs::path dicom;              // kDicom: the export folder
};

// TIFF files are volumes for a 3D model and slices for a 2D one; PNG files are slices; the rest is
// NIfTI (find_raw_cases' rules). ConfigError for images given to a model of more than one channel.
Inputs gather_inputs(const std::vector<fs::path>& inputs, const fs::path& images, const PredictionMember& first) {
  Inputs in;
  if (is_dicom_export(inputs)) {
    in.kind = InputKind::kDicom;
    in.dicom = inputs[0];
    return in;
  }
  if (first.trained.model.dims == 3) in.links = input_links(inputs, images, in.kind = InputKind::kTiffVolumes);
  if (in.links.empty()) in.links = input_links(inputs, images, in.kind = InputKind::kSlices);
  if (!in.links.empty() && first.info.in_channels != 1) {
    throw ConfigError(fmt::format("predict -i: {} takes {} input channels; a {} is one (grey)",
                                  first.checkpoint.string(), first.info.in_channels,
                                  in.kind == InputKind::kSlices ? "2D image" : "TIFF volume"));
  }
  if (in.links.empty()) {
    in.kind = InputKind::kNifti;
    in.cases = find_raw_cases(inputs, first.info.in_channels);
    in.links = nifti_links(in.cases, images);
  }
  return in;
}

// The inputs linked and imported into the scratch dataset `path` by their kind's importer; the
// number of cases. The importers' messages name the user's files, not the links.
size_t import_inputs(const Inputs& in, const PredictionMember& first,
                     const std::optional<std::array<double, 3>>& spacing, const fs::path& images,
                     const std::string& path, const fs::path& structures) {
  link_inputs(in.links);
  try {
    if (in.kind == InputKind::kDicom)
      return static_cast<size_t>(import_dicom_inputs(first, in.dicom, structures, path));
    if (in.kind == InputKind::kSlices) return static_cast<size_t>(import_image_cases(first, images, path));
    if (in.kind == InputKind::kTiffVolumes) return static_cast<size_t>(import_tiff_cases(first, images, path));
    import_nifti_cases(first, spacing, images, path);
    return in.cases.size();
  } catch (const DataError& e) {
    throw DataError(with_input_names(e.what(), in.links));
  } catch (const IoError& e) {
    throw IoError(with_input_names(e.what(), in.links));
  }
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
  const std::vector<fs::path> inputs(cmd.inputs.begin(), cmd.inputs.end());
  refuse_out_over_inputs(out, inputs);  // before the scratch folder beside OUT exists
  const StagedFolder scratch(out.parent_path() / ("." + out.filename().string() + ".work"));
  std::vector<PredictionMember> members;
  if (!cmd.model.empty()) members.push_back(member_from_export(cmd.model, scratch.path() / "checkpoints"));
  for (const auto& run : cmd.model.empty() ? member_runs(cmd) : std::vector<fs::path>{}) {
    members.push_back(read_prediction_member(run / "checkpoints", /*keep_last=*/0, cmd.checkpoint));
  }
  const PredictionMember& first = members.front();
  const fs::path images = scratch.path() / "images";
  if (first.info.task != "segmentation" && !is_dicom_export(inputs)) {
    if (inputs.size() > 1) {
      throw UsageError(fmt::format(
          "predict -i: {} is a {} run, which takes ONE DICOM export folder (-i DIR: a patient's folder or a folder "
          "of patients' folders); {} inputs were given: put them in one folder or predict them one by one",
          first.checkpoint.string(), first.info.task, inputs.size()));
    }
    throw ConfigError(
        fmt::format("predict -i: {} is a {} run; its raw inputs are a DICOM export folder (RT Dose out), or "
                    "import the data and use trainer predict -c CONFIG",
                    first.checkpoint.string(), first.info.task));
  }
  const Inputs in = gather_inputs(inputs, images, first);
  if (in.kind != InputKind::kDicom && !cmd.structures.empty()) {
    throw UsageError("predict: --structures names the structures of a DICOM export; -i holds no DICOM folder");
  }
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
  const auto spacing = in.kind == InputKind::kNifti ? training_spacing(first.trained) : std::nullopt;
  const std::string model = cmd.model.empty() ? cmd.run : cmd.model;
  if (in.kind == InputKind::kDicom) {
    spdlog::info("predict: the DICOM export {} with {} model(s) of {}", in.dicom.string(), members.size(), model);
  } else if (in.kind != InputKind::kNifti) {
    spdlog::info("predict: {} {} with {} model(s) of {}", in.links.size(),
                 in.kind == InputKind::kSlices ? "2D image(s)" : "TIFF volume(s)", members.size(), model);
  } else {
    spdlog::info(
        "predict: {} case(s) of {} channel(s) with {} model(s) of {}{}", in.cases.size(), first.info.in_channels,
        members.size(), model,
        spacing ? fmt::format(", resampled to the run's {} x {} x {} mm", (*spacing)[2], (*spacing)[1], (*spacing)[0])
                : std::string());
  }
  const StopSignals signals;  // a stop between cases removes everything staged
  StagedFolder staged(out);
  size_t n_cases = 0;
  {
    const QuietScope quiet;
    cfg.data.path = (scratch.path() / "input.h5").string();
    n_cases = import_inputs(in, first, spacing, images, cfg.data.path, cmd.structures);
    const Runtime rt = init_runtime(cfg);
    const DatasetReader reader(cfg.data.path);
    const ResolvedPrediction rp = resolve_prediction(cfg, members, reader, rt.device);
    predict_split(rp, reader, scratch.path() / "predictions", rt);
  }
  refuse_skipped(scratch.path() / "predictions" / "test_skipped.csv", in.links, n_cases);
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
  spdlog::info("predict: wrote {} case(s) into {} ({}) with the inputs' geometry; checkpoint{}: {}", n_cases,
               out.string(), fmt::join(names, ", "), members.size() > 1 ? "s (ensemble)" : "",
               fmt::join(checkpoints, ", "));
  return kExitOk;
}

}  // namespace u3d
