// `trainer import dicom --source DIR --out FILE.h5 [--task dose|segmentation] [--structures map.yaml]
// [--series UID] [--strict] [--anonymize]` (io/dicom/dicom_import.h; docs/dicom.md), and the DICOM inputs
// of `trainer predict -i EXPORT_DIR -o OUT --run RUN` (app/predict_files_command.cpp).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace u3d {

struct ImportDicomCommand {
  std::string source;         // --source DIR: a folder tree of DICOM files
  std::string out;            // --out FILE.h5
  std::string task = "dose";  // --task dose|segmentation
  std::string structures;     // --structures map.yaml (channel: [names]); "": every structure found
  std::string series;         // --series UID: the image series to import
  bool skip_bad = false;      // --skip-bad: accepted, what the import does anyway (leave a bad patient out)
  bool strict = false;        // --strict: any unusable patient refuses the import (exit 1), every reason listed
  bool anonymize = false;     // --anonymize: case ids case_000...; no names or paths in the file
  double val_fraction = 0.2;  // --val-fraction
  uint64_t seed = 0;          // --seed (val selection)
  bool force = false;         // --force: replace an existing output file
};
int import_dicom_command(const ImportDicomCommand& cmd);

struct PredictionMember;  // predict/resolve_prediction.h

// True when -i is one folder whose first file (any depth; hidden entries skipped, at most 64 files
// looked at) that is NIfTI, a 2D image or DICOM is DICOM: a planning system's export.
bool is_dicom_export(const std::vector<std::filesystem::path>& inputs);

// The export `source` imported into the dataset `path` for prediction (inputs only, every case in split
// 'test'), with the run's task and structures: the map in `structures`, else the run's channel (dose)
// or class (segmentation) names after the first, each its own structure name (from data.channels or the
// run's dataset file). The number of cases. UsageError when the run's names cannot be read and no map
// is given; ConfigError when the channels made are not as many as the run takes.
int64_t import_dicom_inputs(const PredictionMember& run, const std::filesystem::path& source,
                            const std::filesystem::path& structures, const std::string& path);

}  // namespace u3d
