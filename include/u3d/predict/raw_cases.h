// The raw image files of `trainer predict -i` grouped into cases as nnUNetv2_predict does: one file
// per input channel, NAME_0000<ending>, NAME_0001<ending>, ... (four digits, the channel's index),
// where <ending> is .nii.gz or .nii. A case is predicted into NAME<ending> (predict_files_command,
// app/commands.h).
//
//   find_raw_cases({"imagesTs"}, /*channels=*/2)
//     -> {{"case_004", {imagesTs/case_004_0000.nii.gz, imagesTs/case_004_0001.nii.gz}}, ...}
//
// Folders are read one level deep (hidden files and files of other endings are left alone, as
// nnU-Net does); a file named on the command line must be a channel file. Every refusal is one line
// naming the file or the case: a missing input, a name without the _XXXX channel suffix, a case with
// channel files missing or more than the model takes, the same channel given twice, no input at all.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace u3d {

struct RawCase {
  std::string id;                               // NAME
  std::vector<std::filesystem::path> channels;  // NAME_0000<ending>, NAME_0001<ending>, ... in channel order
};

// The cases of `inputs` (files and folders) for a model of `channels` input channels, sorted by
// name. UsageError (exit 2) for an input that does not exist, a file that is not NIfTI and every
// naming refusal: no channel suffix, a channel given twice, more or fewer channel files than the
// model takes (only _0001 files); DataError for a folder without NIfTI files.
std::vector<RawCase> find_raw_cases(const std::vector<std::filesystem::path>& inputs, int64_t channels);

}  // namespace u3d
