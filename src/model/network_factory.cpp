// build_network (declared in model/unet.h): the one place that knows every network family. Its own
// file, so that unet.cpp need not include the networks built on UNet3d's base (mlperf_unet3d.h,
// openkbp_baseline.h include unet.h).
#include "u3d/core/errors.h"
#include "u3d/model/mlperf_unet3d.h"
#include "u3d/model/openkbp_baseline.h"
#include "u3d/model/unet.h"

namespace u3d {

Network build_network(const ModelConfig& cfg, int64_t in_channels, int64_t out_channels) {
  switch (cfg.architecture) {
    case Architecture::kUNet:
    case Architecture::kResEncUNet: return std::make_shared<UNet3dImpl>(cfg, in_channels, out_channels);
    case Architecture::kOpenKbpBaseline: return std::make_shared<OpenKbpBaselineImpl>(cfg, in_channels, out_channels);
    case Architecture::kMlperfUNet3d: return std::make_shared<MlperfUNet3dImpl>(cfg, in_channels, out_channels);
  }
  throw ConfigError("model.architecture: unknown architecture");
}

}  // namespace u3d
