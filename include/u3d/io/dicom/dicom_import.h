// `trainer import dicom`: a folder tree of DICOM files (a treatment-planning system's export: CT or MR
// series, RT Structure Sets, DICOM SEGs, RT Doses, RT Plans) into the dataset format v1. docs/dicom.md.
//
// Files are found at any depth under any name and grouped by PatientID, then by SeriesInstanceUID;
// one case per patient. The image series (CT or MR, io/dicom/dicom.h) is the case's grid:
//   - dose task: channels [modality, structure channels...], target "dose" (Gy): the RT Dose
//     trilinearly resampled onto the grid (0 outside the dose grid);
//   - segmentation task: channel [modality], target "labels": one label map, class k = the k-th
//     structure channel; where structures overlap, the one listed first in the map wins.
// Structure channels: each a target name with the structure names that fill it (--structures YAML,
// `PTV70: [PTV_70, PTV 7000, ptv70]`; names matched without regard to case or surrounding blanks;
// several names of one channel are united). Without a map, every structure name found in any patient
// is a channel of its own (sorted). A patient without an RT Dose (dose) or RT Structure Set
// (segmentation) goes to split 'test' without target; labelled patients to 'train' / 'val'.
// Structures come from the RT Structure Set's ROIs and the DICOM SEGs' segments (io/dicom/dicom_seg.h) alike.
// Candidate series: --series UID, else the one series of the patient, else the one its RT Structure
// Set (or SEG) references; otherwise the patient is refused naming the candidates. The RT Plan the RT
// Dose references (else the only one) gives the prescription. Provenance (the UIDs of what was read,
// the prescription) goes into source_* attributes of each case (docs/dicom.md).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "u3d/io/h5/dataset.h"

namespace u3d {

// The structure map: target channel -> the names planners type for it, in the file's order.
using StructureMap = std::vector<std::pair<std::string, std::vector<std::string>>>;

struct DicomImportOptions {
  std::filesystem::path source;               // folder tree of DICOM files (non-DICOM files are skipped)
  Task task = Task::kDose;                    // dose | segmentation
  std::filesystem::path structures;           // YAML structure map; empty: structure_map, else every name found
  std::optional<StructureMap> structure_map;  // the map itself when `structures` is empty (a run's channels)
  bool inputs_only = false;                   // prediction inputs: no target read, every case in split 'test'
  std::string series;                         // SeriesInstanceUID of the image series to import; "": the rule above
  bool strict = false;                        // an unusable patient refuses the import (all reasons listed); else
                                              // each is one warning line and left out
  bool anonymize = false;                     // case ids case_000, ... (sorted by PatientID); no names or paths written
  double val_fraction = 0.2;                  // share of labelled cases in split 'val'
  uint64_t seed = 0;                          // which cases go to 'val'
  int compression_level = 4;                  // gzip level of the output
};

struct DicomImportSummary {
  int64_t train = 0, val = 0, test = 0;
  std::vector<std::string> skipped;  // one line per patient left out
  std::vector<std::string> channels;
};

// The structure map of a YAML file; ConfigError naming the file for anything but a map of names to a
// name or a list of names.
StructureMap read_structure_map(const std::filesystem::path& file);
// A structure or channel name as the import matches it: lower case, surrounding blanks removed
// ("  Parotid_L " -> "parotid_l").
std::string structure_key(const std::string& name);

// Every usable patient is imported; each unusable one is a warning line "patient <id>[, series <uid>]:
// <what is wrong>" and listed in the summary. DataError when none is usable, or (strict) when any is
// not, listing every reason; the output is staged and appears only complete.
DicomImportSummary import_dicom(const DicomImportOptions& options, const std::filesystem::path& out);

}  // namespace u3d
