// `trainer import nnunet|nifti|tiff` and `trainer evaluate segmentation`.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "u3d/app/commands.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/signals.h"
#include "u3d/core/text.h"
#include "u3d/evaluate/segmentation_eval.h"
#include "u3d/evaluate/surface_eval.h"
#include "u3d/io/import.h"
#include "u3d/predict/cascade_data.h"

namespace u3d {
namespace {

// A folder named by an option must exist: a usage error (exit 2) as for every other argument; a
// file where the folder belongs is named as such (a single prediction given for a folder of them).
void require_folder(const std::string& path, const std::string& command, const char* option) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw UsageError(fmt::format("{}: {} {}: folder not found", command, option, path));
  }
  if (!std::filesystem::is_directory(path, ec)) {
    throw UsageError(
        fmt::format("{}: {} {}: is a file; expected a folder (of one file per case)", command, option, path));
  }
}

// The common part of an `evaluate` command over two label folders: checks --reference and
// --predictions, copies them and --threads into `o`, and returns the CSV to write: --out, or
// <predictions>/<file_name>; UsageError naming `command` when it exists and --force is not given.
template <class Command, class Options>
std::filesystem::path start_evaluation(const std::string& command, const Command& cmd, const char* file_name,
                                       Options& o) {
  if (cmd.reference.empty() || cmd.predictions.empty()) {
    throw UsageError(command + ": --reference DIR and --predictions DIR are required");
  }
  require_folder(cmd.reference, command, "--reference");
  require_folder(cmd.predictions, command, "--predictions");
  o.reference = cmd.reference;
  o.predictions = cmd.predictions;
  o.threads = cmd.threads;
  o.only_predicted = cmd.only_predicted;
  const std::filesystem::path csv =
      cmd.out.empty() ? std::filesystem::path(cmd.predictions) / file_name : std::filesystem::path(cmd.out);
  std::error_code ec;
  // The label files the evaluation reads (not earlier CSVs): never its --out.
  std::vector<std::filesystem::path> inputs;
  for (const auto& dir : {o.reference, o.predictions}) {
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec) && e.path().extension() != ".csv") inputs.push_back(e.path());
    }
  }
  refuse_output_over_input(command, "--out", csv, inputs);
  if (std::filesystem::exists(csv, ec) && !cmd.force) {
    throw UsageError(
        fmt::format("{}: {} exists; pass --force to replace it or --out another file", command, csv.string()));
  }
  return csv;
}

// Writes the CSV, prints the table; the seconds since `t0`.
double write_evaluation(const std::filesystem::path& csv, const std::string& csv_text, const std::string& table,
                        std::chrono::steady_clock::time_point t0) {
  write_file_atomic(csv, csv_text);
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

NiftiImportOptions import_options(const ImportCommon& c, const char* command) {
  if (c.out.empty()) throw UsageError(fmt::format("{}: --out FILE.h5 is required", command));
  std::error_code ec;
  if (std::filesystem::exists(c.out, ec) && !c.force) {
    throw UsageError(fmt::format("{}: {} exists; pass --force to replace it", command, c.out));
  }
  if (c.val_fraction < 0 || c.val_fraction >= 1) {
    throw UsageError(fmt::format("{}: --val-fraction {} must be in [0, 1)", command, c.val_fraction));
  }
  NiftiImportOptions o;
  o.normalization = c.normalize;
  o.val_fraction = c.val_fraction;
  o.seed = c.seed;
  o.threads = c.threads;
  if (!c.spacing.empty()) {
    auto v = parse_double_list(c.spacing).value_or(std::vector<double>{});
    if (v.empty() || std::any_of(v.begin(), v.end(), [](double x) { return x <= 0; })) {
      throw UsageError(fmt::format("{}: --spacing '{}': expected S or D,H,W in mm (positive)", command, c.spacing));
    }
    if (v.size() == 1) v = {v[0], v[0], v[0]};
    if (v.size() != 3) throw UsageError(fmt::format("{}: --spacing '{}': expected S or D,H,W", command, c.spacing));
    o.spacing = std::array<double, 3>{v[0], v[1], v[2]};
  }
  return o;
}

}  // namespace

int import_nnunet_command(const ImportNnunetCommand& cmd) {
  if (cmd.source.empty()) throw UsageError("import nnunet: --source DatasetXXX_Name is required");
  require_folder(cmd.source, "import nnunet", "--source");
  const NiftiImportOptions o = import_options(cmd.common, "import nnunet");
  const StopSignals signals;  // a stop between cases removes the staged file (StoppedError)
  import_nnunet(cmd.source, cmd.common.out, o);
  return kExitOk;
}

int import_nifti_command(const ImportNiftiCommand& cmd) {
  if (cmd.images.empty()) throw UsageError("import nifti: --images DIR is required");
  require_folder(cmd.images, "import nifti", "--images");
  if (!cmd.labels.empty()) require_folder(cmd.labels, "import nifti", "--labels");
  const NiftiImportOptions o = import_options(cmd.common, "import nifti");
  NiftiFolders f;
  f.images = cmd.images;
  f.labels = cmd.labels;
  f.channel_suffixes = cmd.channel_suffixes;
  f.channel_names = cmd.channel_names;
  f.class_names = cmd.classes;
  const StopSignals signals;  // a stop between cases removes the staged file (StoppedError)
  import_nifti_folders(f, cmd.common.out, o);
  return kExitOk;
}

int import_tiff_command(const ImportTiffCommand& cmd) {
  if (cmd.images.empty()) throw UsageError("import tiff: --images DIR is required");
  require_folder(cmd.images, "import tiff", "--images");
  if (!cmd.labels.empty()) require_folder(cmd.labels, "import tiff", "--labels");
  if (!cmd.common.normalize.empty()) throw UsageError("import tiff: --normalize does not apply (one channel, zscore)");
  const NiftiImportOptions common = import_options(cmd.common, "import tiff");  // --out, --spacing, ...
  TiffImportOptions o;
  o.images = cmd.images;
  o.labels = cmd.labels;
  o.spacing = common.spacing.value_or(o.spacing);
  o.ignore_label = cmd.ignore_label;
  o.val_fraction = common.val_fraction;
  o.seed = common.seed;
  o.threads = common.threads;
  const StopSignals signals;  // a stop between cases removes the staged file (StoppedError)
  import_tiff(o, cmd.common.out);
  return kExitOk;
}

int evaluate_segmentation_command(const EvaluateSegmentationCommand& cmd) {
  SegmentationEvalOptions o;
  const std::filesystem::path csv = start_evaluation("evaluate segmentation", cmd, "evaluation.csv", o);
  for (const int64_t label : cmd.labels) {
    if (label <= 0) {
      throw UsageError(
          fmt::format("evaluate segmentation: --labels {}: label values to score are positive integers "
                      "(0 is the background)",
                      label));
    }
  }
  o.labels = cmd.labels;
  const auto t0 = std::chrono::steady_clock::now();
  const SegmentationEvaluation e = evaluate_segmentation_folders(o);
  const double seconds = write_evaluation(csv, evaluation_csv(e), evaluation_table(e), t0);
  spdlog::info("evaluate: {} cases, {} labels; wrote {} in {:.1f} s", e.cases.size(), e.labels.size(), csv.string(),
               seconds);
  return kExitOk;
}

int evaluate_surface_command(const EvaluateSurfaceCommand& cmd) {
  SurfaceEvalOptions o;
  const std::filesystem::path csv = start_evaluation("evaluate surface", cmd, "surface_evaluation.csv", o);
  if (!(cmd.tolerance >= 0))
    throw UsageError(fmt::format("evaluate surface: --tolerance {}: expected >= 0", cmd.tolerance));
  if (cmd.ignore_label < -1 || cmd.ignore_label == 0 || cmd.ignore_label == 1) {
    throw UsageError(fmt::format(
        "evaluate surface: --ignore-label {}: expected a label other than 0 and 1 (the surface), or -1 for none",
        cmd.ignore_label));
  }
  const auto t0 = std::chrono::steady_clock::now();
  o.tolerance = cmd.tolerance;
  if (cmd.ignore_label < 0)
    o.ignore_label.reset();
  else
    o.ignore_label = cmd.ignore_label;
  const SurfaceEvaluation e = evaluate_surface_folders(o);
  const double seconds = write_evaluation(csv, surface_evaluation_csv(e), surface_evaluation_table(e), t0);
  spdlog::info("evaluate surface: {} cases, mean total {:.4f}; wrote {} in {:.1f} s", e.cases.size(), e.mean.total,
               csv.string(), seconds);
  return kExitOk;
}

int cascade_command(const CascadeCommand& cmd) {
  require_folder(cmd.previous, "cascade", "--previous");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(cmd.data, ec)) {
    throw UsageError(fmt::format("cascade: --data {}: no such dataset file", cmd.data));
  }
  refuse_output_over_input("cascade", "--out", cmd.out, {cmd.data});
  if (std::filesystem::exists(cmd.out, ec) && !cmd.force) {
    throw UsageError(fmt::format("cascade: {} exists; pass --force to replace it", cmd.out));
  }
  CascadeDataOptions o;
  o.previous = cmd.previous;
  o.data = cmd.data;
  o.out = cmd.out;
  o.threads = cmd.threads;
  const StopSignals signals;  // a stop between cases removes the staged file (StoppedError)
  const CascadeDataSummary s = make_cascade_dataset(o);
  spdlog::info(
      "cascade: wrote {}: {} cases, {} with the first stage's out-of-fold segmentation and {} with its predictions of "
      "their split; added channels [{}]",
      cmd.out, s.cases, s.out_of_fold, s.other, fmt::join(s.added_channels, ", "));
  return kExitOk;
}

}  // namespace u3d
