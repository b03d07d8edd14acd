#include <fmt/format.h>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/staged_folder.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/synth.h"

namespace u3d {

void write_phantom_png(const PhantomOptions& o, const std::filesystem::path& dir) {
  if (o.task != Task::kSegmentation) throw UsageError("synth: --format png writes segmentation phantoms only");
  if (o.cases < 2) throw UsageError(fmt::format("synth: --cases {} is too few; need at least 2", o.cases));
  StagedFolder out(dir);  // a failure (full disk, stop signal) leaves no folder, not half of one
  for (int64_t i = 0; i < o.cases; ++i) {
    const CaseData c = make_phantom_case(Task::kSegmentation, o.size, o.seed, i, o.kind);
    // (D, H, W) float -> 8-bit grey over the case's own range, as a scanner's export window would.
    const torch::Tensor image = c.image[0].to(torch::kFloat);
    const double lo = image.min().item<double>(), hi = image.max().item<double>();
    const torch::Tensor grey =
        ((image - lo) * (255.0 / (hi > lo ? hi - lo : 1.0))).round().clamp(0, 255).to(torch::kUInt8);
    const torch::Tensor labels = c.target.to(torch::kUInt8);  // (D, H, W) labels 0..K: the mask values
    for (int64_t z = 0; z < grey.size(0); ++z) {
      const std::string stem = fmt::format("{}_{}", c.id, z + 1);
      write_png_gray8(out.path() / (stem + ".png"), grey[z].contiguous());
      write_png_gray8(out.path() / (stem + "_mask.png"), labels[z].contiguous());
    }
  }
  out.commit();
}

}  // namespace u3d
