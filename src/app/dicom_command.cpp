// `trainer import dicom`, and DICOM inputs of `trainer predict -i` (app/dicom_command.h).
#include "u3d/app/dicom_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/io/dicom/dicom.h"
#include "u3d/io/dicom/dicom_import.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/predict/resolve_prediction.h"

namespace u3d {

int import_dicom_command(const ImportDicomCommand& cmd) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (cmd.source.empty()) throw UsageError("import dicom: --source DIR is required");
  if (!fs::is_directory(cmd.source, ec)) {
    throw UsageError(
        fmt::format("import dicom: --source {}: not a folder; expected the folder of DICOM files", cmd.source));
  }
  if (cmd.out.empty()) throw UsageError("import dicom: --out FILE.h5 is required");
  if (fs::exists(cmd.out, ec) && !cmd.force) {
    throw UsageError(fmt::format("import dicom: {} exists; pass --force to replace it", cmd.out));
  }
  if (cmd.task != "dose" && cmd.task != "segmentation") {
    throw UsageError(fmt::format("import dicom: --task {}: expected dose or segmentation", cmd.task));
  }
  if (!(cmd.val_fraction >= 0 && cmd.val_fraction < 1)) {
    throw UsageError(fmt::format("import dicom: --val-fraction {} must be in [0, 1)", cmd.val_fraction));
  }
  if (!cmd.structures.empty() && !fs::is_regular_file(cmd.structures, ec)) {
    throw UsageError(fmt::format("import dicom: --structures {}: not a file; expected a YAML map", cmd.structures));
  }
  DicomImportOptions o;
  o.source = cmd.source;
  o.task = cmd.task == "dose" ? Task::kDose : Task::kSegmentation;
  o.structures = cmd.structures;
  o.series = cmd.series;
  if (cmd.strict && cmd.skip_bad) throw UsageError("import dicom: --strict and --skip-bad contradict; pass one");
  o.strict = cmd.strict;
  o.anonymize = cmd.anonymize;
  o.val_fraction = cmd.val_fraction;
  o.seed = cmd.seed;
  const StopSignals signals;  // a stop between cases removes the staged file
  import_dicom(o, cmd.out);
  return kExitOk;
}

bool is_dicom_export(const std::vector<std::filesystem::path>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (inputs.size() != 1 || !fs::is_directory(inputs[0], ec)) return false;
  int looked = 0;
  for (auto it = fs::recursive_directory_iterator(inputs[0], fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator() && looked < 64; it.increment(ec)) {
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    ++looked;
    if (is_nifti_path(it->path()) || is_image2d_path(it->path())) return false;
    if (dicom_file_info(it->path())) return true;
  }
  return false;
}

int64_t import_dicom_inputs(const PredictionMember& first, const std::filesystem::path& source,
                            const std::filesystem::path& structures, const std::string& path) {
  DicomImportOptions io;
  io.source = source;
  io.task = task_from_string(first.info.task);
  io.inputs_only = true;
  io.compression_level = 1;
  io.structures = structures;
  if (structures.empty()) {  // the run's names after the image channel, each its own structure name
    std::vector<std::string> names = io.task == Task::kDose ? first.trained.data.channels : std::vector<std::string>{};
    if (names.empty()) {
      try {
        const DatasetInfo info = DatasetReader(first.trained.data.path).info();
        names = io.task == Task::kSegmentation ? info.class_names : info.channel_names;
      } catch (const std::exception& e) {
        throw UsageError(
            fmt::format("predict -i: the run's dataset {} cannot be read ({}); name the structures with "
                        "--structures map.yaml, the map its data was imported with",
                        first.trained.data.path, error_line(e)));
      }
    }
    if (names.empty()) {
      throw UsageError(
          fmt::format("predict -i: the run's dataset {} names no classes; name the structures with "
                      "--structures map.yaml",
                      first.trained.data.path));
    }
    io.structure_map.emplace();
    for (size_t k = 1; k < names.size(); ++k) io.structure_map->emplace_back(names[k], std::vector{names[k]});
  }
  const DicomImportSummary summary = import_dicom(io, path);
  const int64_t channels = static_cast<int64_t>(summary.channels.size());
  if (channels != first.info.in_channels) {
    throw ConfigError(fmt::format("predict -i: {} takes {} input channels; the DICOM import made {} ([{}])",
                                  first.checkpoint.string(), first.info.in_channels, channels,
                                  fmt::join(summary.channels, ", ")));
  }
  return summary.test;
}

}  // namespace u3d
