// model.preset (config_options.h: apply_model_preset): the model keys each preset sets where the
// config leaves them unset.
#include <string>
#include <utility>
#include <vector>

#include "config_options.h"

namespace u3d::config_detail {

namespace {

int64_t pow2(int64_t e) { return int64_t{1} << e; }

using Keys = std::vector<std::pair<std::string, std::string>>;

// nnU-Net's ResEnc U-Net; levels from the patch: down-sampling while every axis divides by 2 and
// keeps >= 4 voxels (nnU-Net's minimum edge of a feature map), at most 8 levels.
Keys resenc_keys(const Config& cfg) {
  int64_t levels = 1;
  while (levels < 8) {
    bool fits = true;
    for (const int64_t n : cfg.data.patch_size) fits = fits && n % pow2(levels) == 0 && n / pow2(levels) >= 4;
    if (!fits) break;
    ++levels;
  }
  return {{"model.architecture", "resenc_unet"},
          {"model.levels", std::to_string(levels)},
          {"model.base_filters", "32"},
          {"model.max_filters", "320"},
          {"model.kernel_size", "3"},
          {"model.norm", "instance"},
          {"model.activation", "leaky_relu"},
          {"model.negative_slope", "0.01"},
          {"model.convs_per_level", "1"},
          {"model.blocks_per_level", "[1, 3, 4, 6, 6, 6, 6, 6]"}};
}

// The MLPerf 3D U-Net (model/mlperf_unet3d.h): the reference's fixed network.
const Keys kMlperf = {{"model.architecture", "mlperf_unet3d"},
                      {"model.levels", "6"},
                      {"model.base_filters", "32"},
                      {"model.max_filters", "320"},
                      {"model.kernel_size", "3"},
                      {"model.norm", "instance"},
                      {"model.activation", "relu"},
                      {"model.convs_per_level", "2"},
                      {"model.deep_supervision", "false"}};

// The 2D slice U-Net of the brain-MRI slice user (Buda et al.'s brain-segmentation-pytorch): filters
// 32, 64, 128, 256 and a 512 bottleneck (4 down-samplings), two 3x3 conv - batch norm - ReLU per
// stage, transposed-conv up-sampling, a 1x1 head: 7,762,465 parameters for 1 input channel and one
// output channel (7,762,498 with two softmax outputs). Down-sampling is the stage's first
// convolution with stride 2 instead of a max-pool (no parameters either way).
const Keys kUNet2d = {{"model.architecture", "unet"}, {"model.dims", "2"},
                      {"model.levels", "5"},          {"model.base_filters", "32"},
                      {"model.max_filters", "512"},   {"model.kernel_size", "3"},
                      {"model.norm", "batch"},        {"model.activation", "relu"},
                      {"model.convs_per_level", "2"}, {"model.deep_supervision", "false"}};

}  // namespace

void apply_model_preset(Config& cfg) {
  const ModelPreset preset = cfg.model.preset;
  if (preset == ModelPreset::kNone) return;
  const Keys keys = preset == ModelPreset::kMlperfUNet3d ? kMlperf
                    : preset == ModelPreset::kUNet2d     ? kUNet2d
                                                         : resenc_keys(cfg);
  const std::string where = "model.preset: " + to_string(preset);
  for (const auto& [key, value] : keys) {
    if (!cfg.origin.count(key)) find_option(key)->set(cfg, YAML::Load(value), where);
  }
}

}  // namespace u3d::config_detail
