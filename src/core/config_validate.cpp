// validate() of core/config.h: the cross-key checks of a loaded config, each ConfigError naming the
// key and where it was set (key_origin). Beside config_text.cpp (loading, printing), apart from
// config.h, which output_head.h and stage_geometry.h include, so that those checks sit above the
// config's types.
#include <fmt/format.h>

#include <set>
#include <string>

#include "config_codec.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/output_head.h"
#include "u3d/core/stage_geometry.h"

namespace u3d {

using config_detail::Codec;

void validate(const Config& cfg) {
  const auto& m = cfg.model;
  if (cfg.data.path.empty()) {
    throw ConfigError(
        fmt::format("{}: data.path: required; the dataset file to train on (make one with "
                    "`trainer synth` or `trainer import`)",
                    key_origin(cfg, "data.path")));
  }
  if (m.max_filters < m.base_filters) {
    throw ConfigError(fmt::format("{}: model.max_filters: {} is below model.base_filters = {}",
                                  key_origin(cfg, "model.max_filters"), m.max_filters, m.base_filters));
  }
  validate_stage_geometry(cfg);  // first: model.dims 2 on the wrong architecture names itself
  if (m.architecture == Architecture::kOpenKbpBaseline) {
    for (int axis = 0; axis < 3; ++axis) {
      if (cfg.data.patch_size[axis] % 64 != 0) {
        throw ConfigError(
            fmt::format("{}: data.patch_size: {} must divide by 64 in every axis for model.architecture = "
                        "openkbp_baseline (six stride-2 stages); OpenKBP volumes are 128",
                        key_origin(cfg, "data.patch_size"), Codec<Shape3>::format(cfg.data.patch_size)));
      }
    }
  }
  if (m.architecture == Architecture::kResEncUNet && !m.blocks_per_level.empty() &&
      static_cast<int64_t>(m.blocks_per_level.size()) < m.levels) {
    throw ConfigError(fmt::format("{}: model.blocks_per_level: {} entries for model.levels = {}; give one per level",
                                  key_origin(cfg, "model.blocks_per_level"), m.blocks_per_level.size(), m.levels));
  }
  if (m.architecture == Architecture::kMlperfUNet3d) {
    const auto refuse = [&](const std::string& key, const std::string& value, const std::string& want) {
      throw ConfigError(
          fmt::format("{}: {}: {} does not apply to model.architecture = mlperf_unet3d (the MLPerf "
                      "reference network); set it to {}",
                      key_origin(cfg, key), key, value, want));
    };
    if (m.levels < 2) refuse("model.levels", std::to_string(m.levels), "at least 2");
    if (m.deep_supervision) refuse("model.deep_supervision", "true", "false");
    if (m.dropout > 0) refuse("model.dropout", fmt::format("{}", m.dropout), "0");
    if (m.activation_checkpointing != Checkpointing::kOff) {
      refuse("model.activation_checkpointing", to_string(m.activation_checkpointing), "off");
    }
  }
  if (m.architecture == Architecture::kOpenKbpBaseline && m.activation_checkpointing != Checkpointing::kOff) {
    throw ConfigError(
        fmt::format("{}: model.activation_checkpointing: {} applies to unet and resenc_unet, not to "
                    "openkbp_baseline; set it to off",
                    key_origin(cfg, "model.activation_checkpointing"), to_string(m.activation_checkpointing)));
  }
  validate_head(cfg);
  const Shape3 divisor = patch_divisor(m);  // 2^(levels - 1) per axis unless model.strides says otherwise
  for (int axis = 0; axis < 3; ++axis) {
    if (cfg.data.patch_size[axis] % divisor[axis] != 0) {
      throw ConfigError(fmt::format(
          "{}: data.patch_size: {} must divide by {} (D, H, W) for model.levels = {} (the product of the strides)",
          key_origin(cfg, "data.patch_size"), Codec<Shape3>::format(cfg.data.patch_size),
          Codec<Shape3>::format(divisor), m.levels));
    }
  }
  if (!cfg.data.channels.empty() && cfg.data.normalize.size() != 1 &&
      cfg.data.normalize.size() != cfg.data.channels.size()) {
    throw ConfigError(
        fmt::format("{}: data.normalize: {} entries for {} channels in data.channels; give one "
                    "entry (all channels) or one per channel",
                    key_origin(cfg, "data.normalize"), cfg.data.normalize.size(), cfg.data.channels.size()));
  }
  std::set<std::string> unique_channels(cfg.data.channels.begin(), cfg.data.channels.end());
  if (unique_channels.size() != cfg.data.channels.size()) {
    throw ConfigError(fmt::format("{}: data.channels: a channel is listed twice", key_origin(cfg, "data.channels")));
  }
  if (cfg.training.device == Device::kCpu && cfg.training.precision == Precision::kFp16) {
    throw ConfigError(
        fmt::format("{}: training.precision: fp16 needs a CUDA device (training.device is cpu); use "
                    "bf16 or fp32 on CPU",
                    key_origin(cfg, "training.precision")));
  }
  if (cfg.training.device == Device::kCpu && m.fused_kernels == Toggle::kOn) {
    throw ConfigError(
        fmt::format("{}: model.fused_kernels: on needs a CUDA device (training.device is cpu); use "
                    "auto or off",
                    key_origin(cfg, "model.fused_kernels")));
  }
  if (cfg.training.device == Device::kCpu && cfg.training.cuda_graph == Toggle::kOn) {
    throw ConfigError(
        fmt::format("{}: training.cuda_graph: on needs a CUDA device (training.device is cpu); use "
                    "auto or off",
                    key_origin(cfg, "training.cuda_graph")));
  }
  if (m.output_activation != OutputActivation::kNone && cfg.training.loss == LossKind::kDiceCe) {
    throw ConfigError(fmt::format("{}: model.output_activation: must be none with training.loss = dice_ce",
                                  key_origin(cfg, "model.output_activation")));
  }
  const auto& rp = cfg.augment.rot90_plane;
  if (cfg.augment.rot90_prob > 0 &&
      cfg.data.patch_size[static_cast<size_t>(rp[0])] != cfg.data.patch_size[static_cast<size_t>(rp[1])]) {
    throw ConfigError(
        fmt::format("{}: augment.rot90_plane: the patch {} is not square in axes {} and {}; rotating "
                    "by 90 degrees needs equal patch sizes there",
                    key_origin(cfg, "augment.rot90_plane"), Codec<Shape3>::format(cfg.data.patch_size), rp[0], rp[1]));
  }
  const bool pseudo =
      cfg.checkpoint.monitor == Monitor::kPseudoDice || cfg.checkpoint.monitor == Monitor::kPseudoDiceEma;
  if (pseudo && cfg.training.val_patch_batches == 0) {
    throw ConfigError(fmt::format("{}: checkpoint.monitor: {} needs training.val_patch_batches > 0",
                                  key_origin(cfg, "checkpoint.monitor"), to_string(cfg.checkpoint.monitor)));
  }
  if (cfg.checkpoint.monitor == Monitor::kAuto && !cfg.training.val_full && cfg.training.val_patch_batches == 0 &&
      !cfg.data.val_split.empty()) {
    throw ConfigError(
        fmt::format("{}: training.val_full: false leaves no validation; set "
                    "training.val_patch_batches > 0 or data.val_split: \"\"",
                    key_origin(cfg, "training.val_full")));
  }
  const auto& fold = cfg.experiment.fold;
  if (cfg.data.folds == 0 && !fold.empty()) {
    throw ConfigError(fmt::format("{}: experiment.fold: {} needs data.folds >= 2 (the number of folds)",
                                  key_origin(cfg, "experiment.fold"), fold));
  }
  if (const auto k = fold_number(cfg); k && *k >= cfg.data.folds) {
    throw ConfigError(fmt::format("{}: experiment.fold: {} is not a fold of data.folds = {}; expected 0..{} or all",
                                  key_origin(cfg, "experiment.fold"), *k, cfg.data.folds, cfg.data.folds - 1));
  }
  if (cfg.training.min_lr > cfg.training.lr) {
    throw ConfigError(fmt::format("{}: training.min_lr: {} is above training.lr = {}",
                                  key_origin(cfg, "training.min_lr"), cfg.training.min_lr, cfg.training.lr));
  }
}

}  // namespace u3d
