// `trainer import images` (app/images_command.h).
#include "u3d/app/images_command.h"

#include <fmt/format.h>

#include <filesystem>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"

namespace u3d {

int import_images_command(const ImportImagesCommand& cmd) {
  namespace fs = std::filesystem;
  const ImagesImportOptions& o = cmd.options;
  std::error_code ec;
  if (o.images.empty()) throw UsageError("import images: --images DIR is required");
  for (const auto& [option, dir] : {std::pair{"--images", o.images}, std::pair{"--labels", o.labels}}) {
    if (!dir.empty() && !fs::is_directory(dir, ec)) {
      throw UsageError(fmt::format("import images: {} {}: not a folder; expected a folder of PNG/TIFF slices", option,
                                   dir.string()));
    }
  }
  if (cmd.out.empty()) throw UsageError("import images: --out FILE.h5 is required");
  if (fs::exists(cmd.out, ec) && !cmd.force) {
    throw UsageError(fmt::format("import images: {} exists; pass --force to replace it", cmd.out));
  }
  if (o.mask_suffix.empty() && (o.labels.empty() || fs::equivalent(o.images, o.labels, ec))) {
    throw UsageError("import images: --mask-suffix '': masks beside the images need a suffix (or pass --labels DIR)");
  }
  const StopSignals signals;  // a stop between cases removes the staged file
  import_images(o, cmd.out);
  return kExitOk;
}

}  // namespace u3d
