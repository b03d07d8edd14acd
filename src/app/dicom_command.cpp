// `trainer import dicom` (app/dicom_command.h).
#include "u3d/app/dicom_command.h"

#include <fmt/format.h>

#include <filesystem>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/io/dicom_import.h"

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
  o.skip_bad = cmd.skip_bad;
  o.anonymize = cmd.anonymize;
  o.val_fraction = cmd.val_fraction;
  o.seed = cmd.seed;
  const StopSignals signals;  // a stop between cases removes the staged file
  import_dicom(o, cmd.out);
  return kExitOk;
}

}  // namespace u3d
