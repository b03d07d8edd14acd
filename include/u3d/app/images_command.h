// `trainer import images --images DIR [--labels DIR] --out FILE.h5 [--group REGEX] [--mask-suffix _mask]
// [--skip-unpaired] [--val-fraction F] [--test-fraction F] [--seed S] [--reference-out DIR] [--force]`
// (io/images/image2d_import.h; docs/slices.md): folders of 2D PNG/TIFF slices, one case per patient.
#pragma once
#include <string>

#include "u3d/io/images/image2d_import.h"

namespace u3d {

struct ImportImagesCommand {
  // --images, --labels, --group, --mask-suffix, --skip-unpaired, --val-fraction, --test-fraction,
  // --seed, --reference-out, --threads: the importer's options as they are.
  ImagesImportOptions options;
  std::string out;     // --out FILE.h5
  bool force = false;  // --force: replace an existing output file
};
int import_images_command(const ImportImagesCommand& cmd);

}  // namespace u3d
