// `trainer import dicom --source DIR --out FILE.h5 [--task dose|segmentation] [--structures map.yaml]
// [--series UID] [--skip-bad] [--anonymize]` (io/dicom_import.h; docs/dicom.md).
#pragma once
#include <cstdint>
#include <string>

namespace u3d {

struct ImportDicomCommand {
  std::string source;         // --source DIR: a folder tree of DICOM files
  std::string out;            // --out FILE.h5
  std::string task = "dose";  // --task dose|segmentation
  std::string structures;     // --structures map.yaml (channel: [names]); "": every structure found
  std::string series;         // --series UID: the image series to import
  bool skip_bad = false;      // --skip-bad: leave a bad patient out with one warning line
  bool anonymize = false;     // --anonymize: case ids case_000...; no names or paths in the file
  double val_fraction = 0.2;  // --val-fraction
  uint64_t seed = 0;          // --seed (val selection)
  bool force = false;         // --force: replace an existing output file
};
int import_dicom_command(const ImportDicomCommand& cmd);

}  // namespace u3d
