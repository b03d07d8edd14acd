"""The unet3d-trainer networks in plain PyTorch, for using an exported model outside the trainer.

`trainer export RUN_DIR` writes a trained network as model.safetensors, model.pt (a plain dict
that `torch.load(path, weights_only=True)` reads) and/or model.ts (TorchScript traced from the C++
network). This module rebuilds the networks of src/model/ (unet, resenc_unet, openkbp_baseline, mlperf_unet3d)
with exactly the LibTorch parameter and buffer names and the same forward computation, so the
weights load with `load_state_dict(strict=True)` and give the C++ network's outputs; it also has
the C++ predictor's sliding-window inference (Gaussian importance weighting).

It needs torch only (the `safetensors` package is used when installed; otherwise a built-in reader).
It is the one PyTorch copy of the networks: scripts/python/export_onnx.py, check_export.py, the tests
and the benchmarks (scripts/bench/pytorch_step.py) build them here. The code lives in the package
u3d_model_parts/ beside this file: config (the model.* keys, the metadata), layers (ConvBlock,
ResidualBlock, norms), networks (UNet3d, OpenKbpBaseline, build), mlperf (MlperfUNet3d), files (load,
read_safetensors), inference (normalize, predict, finalize).

Usage::

    import torch, u3d_model
    net = u3d_model.load("export/model.safetensors")   # or model.pt, model.ts; eval mode
    info = u3d_model.decoded_meta(net.meta)             # channels, labels, patch_size, spacing, ...
    image = u3d_model.normalize(raw, net.meta)                # meta["normalize"], per channel
    out = u3d_model.predict(net, image)                 # (C_out, D, H, W) float32
    result = u3d_model.finalize(out, net.meta)          # labels (D, H, W) uint8, or dose in Gy

Inputs must be preprocessed as in training: a float32 (C_in, D, H, W) tensor whose channels are
meta["channels"] in that order, each normalised by its entry of meta["normalize"] (the resolved
data.normalize; `normalize()` applies them: none | zscore | clip:LO:HI | scale:S | minmax |
ct:LO:HI:MEAN:STD),
resampled to meta["spacing"] when the training data was. Outputs are logits for segmentation
(channel 0 = background, meta["labels"]) and dose / target_scale for dose (`finalize()` multiplies
back). Every spatial size given to the network must divide by `size_divisor(net)` (2^(levels-1), 64
for openkbp_baseline); `predict()` takes care of that with meta["patch_size"] windows.
"""

import os
import sys

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # the package beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from u3d_model_parts.config import (DEFAULTS, _is_sigmoid, _triple, _yaml_section, config_value,  # noqa: E402
                                    decoded_meta, model_config, stage_geometry)
from u3d_model_parts.files import _check_meta, _file_kind, _load_state, load, read_safetensors
from u3d_model_parts.inference import finalize, gaussian_importance_map, normalize, predict, window_starts
from u3d_model_parts.layers import ConvBlock, InstanceNorm3d, ResidualBlock
from u3d_model_parts.mlperf import MlperfUNet3d
from u3d_model_parts.networks import OpenKbpBaseline, UNet3d, build, size_divisor

__all__ = [
    "build", "load", "predict", "finalize", "normalize", "size_divisor", "decoded_meta", "config_value",
    "model_config", "stage_geometry", "read_safetensors", "window_starts", "gaussian_importance_map",
    "UNet3d", "OpenKbpBaseline", "ConvBlock", "ResidualBlock", "InstanceNorm3d", "MlperfUNet3d", "DEFAULTS",
]
