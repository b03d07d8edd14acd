"""The unet3d-trainer networks in plain PyTorch, for using an exported model outside the trainer.

`trainer export RUN_DIR` writes a trained network as model.safetensors, model.pt (a plain dict
that `torch.load(path, weights_only=True)` reads) and/or model.ts (TorchScript traced from the C++
network). This module rebuilds the networks of src/model/ (unet, resenc_unet, openkbp_baseline, mlperf_unet3d)
with exactly the LibTorch parameter and buffer names and the same forward computation, so the
weights load with `load_state_dict(strict=True)` and give the C++ network's outputs; it also has
the C++ predictor's sliding-window inference (Gaussian importance weighting).

It needs torch only (the `safetensors` package is used when installed; otherwise a built-in reader).

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

from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "build", "load", "predict", "finalize", "normalize", "size_divisor", "decoded_meta", "config_value",
    "model_config", "read_safetensors", "window_starts", "gaussian_importance_map",
    "UNet3d", "OpenKbpBaseline", "ConvBlock", "ResidualBlock", "MlperfUNet3d",
]

# ---------------------------------------------------------------------------------------------
# Model configuration: the resolved model.* keys (include/u3d/core/config.h, docs/config.md).

DEFAULTS = {
    "architecture": "unet",
    "levels": 4,
    "base_filters": 16,
    "max_filters": 320,
    "convs_per_level": 2,
    "blocks_per_level": [],
    "kernel_size": 3,
    "kernel_sizes": [],  # per stage (D, H, W) triples; empty: kernel_size everywhere
    "strides": [],  # per stage (D, H, W) triples; empty: 1 at stage 0, then 2
    "norm": "instance",
    "norm_groups": 8,
    "activation": "leaky_relu",
    "negative_slope": 0.01,
    "dropout": 0.0,
    "output_activation": "none",
    "deep_supervision": False,
    "head": "softmax",  # segmentation: softmax (K output channels) or sigmoid (K - 1, channel k - 1 = label k)
}
ARCHITECTURES = ("unet", "resenc_unet", "openkbp_baseline", "mlperf_unet3d")
NORMS = ("batch", "instance", "group", "none")
ACTIVATIONS = ("relu", "leaky_relu", "gelu", "elu")
OUTPUT_ACTIVATIONS = ("none", "relu", "sigmoid")
NNUNET_BLOCKS = (1, 3, 4, 6, 6, 6, 6, 6)  # resenc_unet blocks per level when blocks_per_level is empty

# Metadata keys whose values are JSON (all metadata values are stored as strings).
_JSON_KEYS = ("model", "channels", "labels", "normalize", "patch_size", "spacing", "in_channels", "out_channels",
              "size_divisor", "target_scale", "epoch", "format_version")


def _as_bool(v):
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


def model_config(spec) -> dict:
    """The model.* keys (C++ defaults filled in, types checked) from a meta dict (whose "model" is a
    JSON string or dict), a plain model dict, or a resolved config YAML string."""
    if isinstance(spec, str):
        spec = _yaml_section(spec, "model")
    elif isinstance(spec, dict) and "model" in spec:
        m = spec["model"]
        spec = json.loads(m) if isinstance(m, str) else dict(m)
    elif not isinstance(spec, dict):
        raise TypeError(f"model_config: expected a dict or YAML string, got {type(spec).__name__}")
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in spec.items() if v is not None})
    for k in ("levels", "base_filters", "max_filters", "convs_per_level", "kernel_size", "norm_groups"):
        cfg[k] = int(cfg[k])
    for k in ("negative_slope", "dropout"):
        cfg[k] = float(cfg[k])
    cfg["deep_supervision"] = _as_bool(cfg["deep_supervision"])
    bpl = cfg["blocks_per_level"]
    if isinstance(bpl, str):
        bpl = json.loads(bpl) if bpl.strip() else []
    cfg["blocks_per_level"] = [int(b) for b in bpl]
    for k in ("kernel_sizes", "strides"):
        v = cfg[k]
        if isinstance(v, str):
            v = json.loads(v) if v.strip() else []
        cfg[k] = [tuple(int(a) for a in (t if isinstance(t, (list, tuple)) else [t, t, t])) for t in v]
    for key, allowed in (("architecture", ARCHITECTURES), ("norm", NORMS), ("activation", ACTIVATIONS),
                         ("output_activation", OUTPUT_ACTIVATIONS)):
        cfg[key] = str(cfg[key])
        if cfg[key] not in allowed:
            raise ValueError(f"model.{key}: '{cfg[key]}' is not one of {', '.join(allowed)}")
    return cfg


def _activate(y, activation, negative_slope):
    if activation == "relu":
        return torch.relu(y)
    if activation == "leaky_relu":
        return F.leaky_relu(y, negative_slope)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "elu":
        return F.elu(y)
    return y


class InstanceNorm3d(nn.InstanceNorm3d):
    """nn.InstanceNorm3d (affine, no running statistics) without Python's check against a single
    voxel per channel, which LibTorch does not make: a 1x1x1 map normalises to the bias, as in C++
    (the deepest stage of a network given inputs of size_divisor voxels)."""

    def __init__(self, channels):
        super().__init__(channels, affine=True, track_running_stats=False)

    def forward(self, x):
        return torch.instance_norm(x, self.weight, self.bias, None, None, True, self.momentum or 0.0, self.eps,
                                   torch.backends.cudnn.enabled)


def _make_norm(norm, channels, groups):
    if norm == "batch":
        return nn.BatchNorm3d(channels)
    if norm == "instance":
        return InstanceNorm3d(channels)
    if norm == "group":
        g = min(groups, channels)  # largest divisor of `channels` not above the requested count
        while channels % g != 0:
            g -= 1
        return nn.GroupNorm(g, channels)
    return None


# ---------------------------------------------------------------------------------------------
# Networks (src/model/unet.cpp, src/model/openkbp_baseline.cpp): same module names and order.

class ConvBlock(nn.Module):
    """conv -> [dropout] -> [norm] -> [activation]; `bias` None: only without a norm."""

    def __init__(self, cin, cout, stride, cfg, kernel=0, bias=None, activate=True):
        super().__init__()
        k = _triple(kernel if kernel else cfg["kernel_size"])
        if bias is None:
            bias = cfg["norm"] == "none"
        self.conv = nn.Conv3d(cin, cout, k, stride=_triple(stride), padding=tuple(a // 2 for a in k), bias=bias)
        self.dropout = nn.Dropout3d(cfg["dropout"]) if cfg["dropout"] > 0 else None
        self.norm = _make_norm(cfg["norm"], cout, cfg["norm_groups"])
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]
        self.activate = activate

    def forward(self, x):
        y = self.conv(x)
        if self.dropout is not None:
            y = self.dropout(y)
        if self.norm is not None:
            y = self.norm(y)
        return _activate(y, self.activation, self.negative_slope) if self.activate else y


class ResidualBlock(nn.Module):
    """nnU-Net's BasicBlockD: activation(conv2(conv1(x)) + project(pool(x)))."""

    def __init__(self, cin, cout, stride, cfg, kernel=0):
        super().__init__()
        stride = _triple(stride)
        self.conv1 = ConvBlock(cin, cout, stride, cfg, kernel=kernel, bias=True)
        self.conv2 = ConvBlock(cout, cout, 1, cfg, kernel=kernel, bias=True, activate=False)
        self.pool = nn.AvgPool3d(stride, stride) if max(stride) > 1 else None
        self.project = ConvBlock(cin, cout, 1, cfg, kernel=1, bias=False, activate=False) if cin != cout else None
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]

    def forward(self, x):
        skip = self.pool(x) if self.pool is not None else x
        if self.project is not None:
            skip = self.project(skip)
        return _activate(self.conv2(self.conv1(x)) + skip, self.activation, self.negative_slope)


class UNet3d(nn.Module):
    """model.architecture unet and resenc_unet: encoder<l>, up<l>, decoder<l>, head, deep_head<l>."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        self.levels = cfg["levels"]
        self.output_activation = cfg["output_activation"]
        residual = cfg["architecture"] == "resenc_unet"
        bias = True if residual else None
        self.filters = [min(cfg["base_filters"] << l, cfg["max_filters"]) for l in range(self.levels)]
        f = self.filters
        # model.kernel_sizes and model.strides (core/stage_geometry.h): per stage, per axis.
        kernels = cfg["kernel_sizes"] or [_triple(cfg["kernel_size"])] * self.levels
        strides = cfg["strides"] or [(1, 1, 1)] + [(2, 2, 2)] * (self.levels - 1)
        self.divisors = [1, 1, 1]
        for s in strides:
            self.divisors = [d * a for d, a in zip(self.divisors, s)]
        prev = in_channels
        for l in range(self.levels):
            blocks = []
            if residual:
                if l == 0:  # the stem
                    blocks.append(ConvBlock(prev, f[0], 1, cfg, kernel=kernels[0], bias=True))
                    prev = f[0]
                n = cfg["blocks_per_level"][l] if cfg["blocks_per_level"] else NNUNET_BLOCKS[min(l, 7)]
                for b in range(n):
                    blocks.append(ResidualBlock(prev if b == 0 else f[l], f[l], strides[l] if b == 0 else 1, cfg,
                                                kernel=kernels[l]))
            else:
                for c in range(cfg["convs_per_level"]):
                    blocks.append(ConvBlock(prev if c == 0 else f[l], f[l], strides[l] if c == 0 else 1, cfg,
                                            kernel=kernels[l]))
            self.add_module(f"encoder{l}", nn.Sequential(*blocks))
            prev = f[l]
        for l in range(self.levels - 2, -1, -1):
            self.add_module(f"up{l}", nn.ConvTranspose3d(f[l + 1], f[l], strides[l + 1], stride=strides[l + 1]))
            self.add_module(f"decoder{l}", nn.Sequential(*[
                ConvBlock(2 * f[l] if c == 0 else f[l], f[l], 1, cfg, kernel=kernels[l], bias=bias)
                for c in range(cfg["convs_per_level"])]))
        self.head = nn.Conv3d(f[0], out_channels, 1)
        self.deep_heads = []
        if cfg["deep_supervision"]:
            for l in range(1, self.levels - 1):
                self.add_module(f"deep_head{l}", nn.Conv3d(f[l], out_channels, 1))
                self.deep_heads.append(f"deep_head{l}")

    def size_divisor(self):
        return max(self.divisors)

    def _run(self, x, deep):
        skips = []
        y = x
        for l in range(self.levels):
            y = getattr(self, f"encoder{l}")(y)
            skips.append(y)
        for l in range(self.levels - 2, -1, -1):
            y = getattr(self, f"up{l}")(y)
            y = torch.cat([y, skips[l]], dim=1)
            y = getattr(self, f"decoder{l}")(y)
            if deep is not None and 1 <= l <= len(self.deep_heads):
                deep.append(getattr(self, f"deep_head{l}")(y))
        y = self.head(y)
        if self.output_activation == "relu":
            return torch.relu(y)
        if self.output_activation == "sigmoid":
            return torch.sigmoid(y)
        return y

    def forward(self, x):
        """(N, C_in, D, H, W) -> (N, C_out, D, H, W): logits or the regression output."""
        return self._run(x, None)

    def forward_deep(self, x):
        """Outputs at every supervised resolution, full resolution first (training's view)."""
        if not self.deep_heads:
            return [self.forward(x)]
        deep = []
        full = self._run(x, deep)
        return [full] + deep[::-1]


class OpenKbpBaseline(nn.Module):
    """model.architecture openkbp_baseline: the OpenKBP challenge's network, f = base_filters."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        f = cfg["base_filters"]
        down = [f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f]
        prev = in_channels
        for i, n in enumerate(down):
            self.add_module(f"down{i + 1}", nn.Conv3d(prev, n, 4, stride=2, padding=1, bias=False))
            if i + 1 < len(down):
                self.add_module(f"down{i + 1}_norm", nn.BatchNorm3d(n, eps=1e-3, momentum=0.01))
            prev = n
        ups = [8 * f, 8 * f, 4 * f, 2 * f, f]
        up_in = [8 * f, 16 * f, 16 * f, 8 * f, 4 * f]
        for i, (cin, n) in enumerate(zip(up_in, ups)):
            self.add_module(f"up{i + 1}", nn.ConvTranspose3d(cin, n, 4, stride=2, padding=1, bias=False))
            self.add_module(f"up{i + 1}_norm", nn.BatchNorm3d(n, eps=1e-3, momentum=0.01))
        self.dropout = nn.Dropout3d(0.2)
        self.head = nn.ConvTranspose3d(2 * f, out_channels, 4, stride=2, padding=1, bias=True)

    def size_divisor(self):
        return 64

    def forward(self, x):
        skips = []
        y = x
        for i in range(1, 7):
            y = getattr(self, f"down{i}")(y)
            if i < 6:
                y = getattr(self, f"down{i}_norm")(y)
            y = F.leaky_relu(y, 0.2)
            skips.append(y)
        for i in range(5):
            if i > 0:
                y = torch.cat([y, skips[len(skips) - 1 - i]], dim=1)
            y = getattr(self, f"up{i + 1}_norm")(getattr(self, f"up{i + 1}")(y))
            if i == 1 or i == 3:
                y = self.dropout(y)
            y = torch.relu(y)
        y = torch.cat([y, skips[0]], dim=1)
        y = self.head(y)
        y = F.avg_pool3d(y, 3, stride=1, padding=1, count_include_pad=False)
        return torch.relu(y)


class _MlperfConv(nn.Sequential):
    """The MLPerf reference's conv_block_factory: "0" convolution (bias only without a norm), "1"
    norm, then the activation (no module: the C++ fuses it into the norm)."""

    def __init__(self, cin, cout, cfg, kernel=3, stride=1, padding=1, transposed=False, plain=False):
        norm = "none" if plain else cfg["norm"]
        conv = nn.ConvTranspose3d if transposed else nn.Conv3d
        layers = [conv(cin, cout, kernel, stride=stride, padding=padding, bias=norm == "none")]
        made = _make_norm(norm, cout, cfg["norm_groups"])
        if made is not None:
            layers.append(made)
        super().__init__(*layers)
        self.plain = plain
        self.activation = cfg["activation"]
        self.negative_slope = cfg["negative_slope"]

    def forward(self, x):
        y = super().forward(x)
        return y if self.plain else _activate(y, self.activation, self.negative_slope)


class _MlperfBlock(nn.Module):
    def __init__(self, cin, cout, stride, cfg):
        super().__init__()
        k = cfg["kernel_size"]
        self.conv1 = _MlperfConv(cin, cout, cfg, k, stride, k // 2)
        self.conv2 = _MlperfConv(cout, cout, cfg, k, 1, k // 2)

    def forward(self, x):
        return self.conv2(self.conv1(x))


class _MlperfUpBlock(nn.Module):
    def __init__(self, cin, cout, cfg):
        super().__init__()
        k = cfg["kernel_size"]
        self.upsample_conv = _MlperfConv(cin, cout, cfg, 2, 2, 0, transposed=True, plain=True)
        self.conv1 = _MlperfConv(2 * cout, cout, cfg, k, 1, k // 2)
        self.conv2 = _MlperfConv(cout, cout, cfg, k, 1, k // 2)

    def forward(self, x, skip):
        return self.conv2(self.conv1(torch.cat((self.upsample_conv(x), skip), dim=1)))


class _MlperfOutput(nn.Module):
    def __init__(self, cin, cout, cfg):
        super().__init__()
        self.conv = _MlperfConv(cin, cout, cfg, 1, 1, 0, plain=True)

    def forward(self, x):
        return self.conv(x)


class MlperfUNet3d(nn.Module):
    """model.architecture mlperf_unet3d (include/u3d/model/mlperf_unet3d.h): the MLPerf Training 3D
    U-Net with the reference's names: input_block, downsample.<i>, bottleneck, upsample.<j>, output."""

    def __init__(self, cfg, in_channels, out_channels):
        super().__init__()
        self.levels = cfg["levels"]
        f = [min(cfg["base_filters"] << l, cfg["max_filters"]) for l in range(self.levels)]
        self.input_block = _MlperfBlock(in_channels, f[0], 1, cfg)
        self.downsample = nn.ModuleList([_MlperfBlock(f[i], f[i + 1], 2, cfg) for i in range(self.levels - 2)])
        self.bottleneck = _MlperfBlock(f[-2], f[-1], 2, cfg)
        self.upsample = nn.ModuleList([_MlperfUpBlock(f[self.levels - 1 - j], f[self.levels - 2 - j], cfg)
                                       for j in range(self.levels - 1)])
        self.output = _MlperfOutput(f[0], out_channels, cfg)

    def size_divisor(self):
        return 1 << (self.levels - 1)

    def forward(self, x):
        y = self.input_block(x)
        skips = [y]
        for block in self.downsample:
            y = block(y)
            skips.append(y)
        y = self.bottleneck(y)
        for block, skip in zip(self.upsample, reversed(skips)):
            y = block(y, skip)
        return self.output(y)

    def forward_deep(self, x):
        return [self.forward(x)]


def _is_sigmoid(cfg):
    return str(cfg.get("head", "softmax")) == "sigmoid"


def build(meta_or_model_dict, in_channels=None, out_channels=None) -> nn.Module:
    """The network (fresh weights, eval mode) described by an export's meta dict, a model.* dict or
    a resolved config YAML; in_channels/out_channels default to the meta's."""
    spec = meta_or_model_dict
    cfg = model_config(spec)
    if isinstance(spec, dict) and "model" in spec:
        in_channels = int(spec["in_channels"]) if in_channels is None else in_channels
        if out_channels is None:  # the classes K; a sigmoid head (model.head) has K - 1 channels
            out_channels = int(spec["out_channels"]) - (1 if _is_sigmoid(cfg) else 0)
    if in_channels is None or out_channels is None:
        raise ValueError("build: in_channels and out_channels are needed (the meta dict has them)")
    if cfg["architecture"] == "openkbp_baseline":
        net = OpenKbpBaseline(cfg, int(in_channels), int(out_channels))
    elif cfg["architecture"] == "mlperf_unet3d":
        net = MlperfUNet3d(cfg, int(in_channels), int(out_channels))
    else:
        if cfg["architecture"] == "resenc_unet" and cfg["blocks_per_level"] and \
                len(cfg["blocks_per_level"]) < cfg["levels"]:
            raise ValueError("model.blocks_per_level: fewer entries than model.levels")
        net = UNet3d(cfg, int(in_channels), int(out_channels))
    net.config = cfg
    if isinstance(spec, dict) and "model" in spec:
        net.meta = dict(spec)
    return net.eval()


def size_divisor(model) -> int:
    """Every spatial input size must divide by this."""
    if hasattr(model, "size_divisor") and callable(getattr(model, "size_divisor")) and \
            not isinstance(model, torch.jit.ScriptModule):
        return int(model.size_divisor())
    meta = getattr(model, "meta", None) or {}
    if "size_divisor" in meta:
        return int(meta["size_divisor"])
    cfg = model_config(meta)
    return 64 if cfg["architecture"] == "openkbp_baseline" else 1 << (cfg["levels"] - 1)


# ---------------------------------------------------------------------------------------------
# Metadata helpers.

def decoded_meta(meta: dict) -> dict:
    """The metadata with its JSON values decoded (model, channels, labels, patch_size, spacing,
    in/out_channels, target_scale, ...); other values stay strings."""
    out = {}
    for k, v in meta.items():
        if k in _JSON_KEYS and isinstance(v, str):
            try:
                v = json.loads(v)
            except ValueError:
                pass
        out[k] = v
    return out


def _yaml_scalar(s):
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return json.loads(s) if s[0] == '"' else s[1:-1]
    if s in ("true", "false"):
        return s == "true"
    if s in ("null", "~", ""):
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def _yaml_flow_list(s):
    inner = s.strip()[1:-1]
    items, cur, quote = [], "", None
    for ch in inner:
        if quote:
            cur += ch
            if ch == quote and not cur.endswith("\\" + quote):
                quote = None
        elif ch in "\"'":
            quote = ch
            cur += ch
        elif ch == ",":
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur)
    return [_yaml_scalar(i) for i in items]


def _yaml_section(text, section):
    """One section of the trainer's resolved config YAML (flat `key: value` lines, flow lists)."""
    out, inside = {}, False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            inside = line.split(":", 1)[0].strip() == section
            continue
        if inside and ":" in line:
            key, value = line.strip().split(":", 1)
            value = value.strip()
            out[key] = _yaml_flow_list(value) if value.startswith("[") else _yaml_scalar(value)
    return out


def config_value(meta_or_yaml, key):
    """A value of the stored config, e.g. config_value(net.meta, "data.normalize")."""
    text = meta_or_yaml.get("config", "") if isinstance(meta_or_yaml, dict) else meta_or_yaml
    section, name = key.split(".", 1)
    values = _yaml_section(text, section)
    if name not in values:
        raise KeyError(f"{key}: not in the stored config")
    return values[name]


# ---------------------------------------------------------------------------------------------
# Loading.

_ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(path, use_package=True):
    """(tensors, metadata) of a .safetensors file; with the `safetensors` package when installed
    (and use_package), else by the built-in reader of the format (8-byte little-endian header
    length, JSON header, raw little-endian data)."""
    if use_package:
        try:
            from safetensors import safe_open
        except ImportError:
            pass
        else:
            with safe_open(str(path), framework="pt") as f:
                return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: not a safetensors file (header length {n} past the end)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        dtype = _ST_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: {name}: dtype {info['dtype']} is not supported")
        begin, end = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        if end - begin != math.prod(shape) * torch.empty((), dtype=dtype).element_size():
            raise ValueError(f"{path}: {name}: {end - begin} bytes do not fit shape {shape}")
        if end == begin:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            raw = bytearray(data[base + begin:base + end])
            tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape)
    return tensors, meta


def _file_kind(path):
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == b"PK\x03\x04":
        names = zipfile.ZipFile(path).namelist()
        return "jit" if any(n.endswith("/constants.pkl") for n in names) else "pickle"
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    return "unknown"


def _load_state(net, state, path):
    missing = sorted(set(net.state_dict()) - set(state))
    extra = sorted(set(state) - set(net.state_dict()))
    if missing or extra:
        raise ValueError(f"{path}: the weights do not fit the network: missing {missing[:5]}, unexpected "
                         f"{extra[:5]}")
    net.load_state_dict(state, strict=True)  # copies, casting dtypes (e.g. num_batches_tracked)
    return net


def load(path, map_location="cpu"):
    """The exported network in eval mode with `.meta` (the export's metadata, string values).
    model.safetensors / model.pt: a u3d_model network with the weights; model.ts: the TorchScript
    module; a trainer checkpoint (<run>/checkpoints/*.pt) also works (meta holds config, task and
    channel counts only)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    kind = _file_kind(path)
    if kind == "safetensors":
        state, meta = read_safetensors(path)
        _check_meta(meta, path)
        net = _load_state(build(meta), state, path)
    elif kind == "pickle":
        obj = torch.load(path, map_location=map_location, weights_only=True)
        if not isinstance(obj, dict) or "state_dict" not in obj or "meta" not in obj:
            raise ValueError(f"{path}: not an exported model.pt (a dict with state_dict, config and meta)")
        meta = dict(obj["meta"])
        _check_meta(meta, path)
        net = _load_state(build(meta), obj["state_dict"], path)
    elif kind == "jit":
        extra = {"meta.json": ""}
        m = torch.jit.load(path, map_location=map_location, _extra_files=extra)
        if m._c.hasattr("u3d.format"):  # a trainer checkpoint: rebuild from its config
            c = m._c
            cfg_yaml = c.getattr("u3d.config")
            meta = {"format": "u3d-checkpoint", "task": c.getattr("u3d.task"),
                    "in_channels": str(c.getattr("u3d.in_channels")),
                    "out_channels": str(c.getattr("u3d.out_channels")),
                    "model": json.dumps(_yaml_section(cfg_yaml, "model")), "config": cfg_yaml,
                    "patch_size": json.dumps(_yaml_section(cfg_yaml, "data").get("patch_size"))}
            state = dict(m.model.named_parameters())
            state.update(dict(m.model.named_buffers()))
            net = _load_state(build(meta), {k: v.detach() for k, v in state.items()}, path)
        else:
            meta = json.loads(extra["meta.json"]) if extra["meta.json"] else {}
            m.meta = meta
            return m.eval()
    else:
        raise ValueError(f"{path}: not a safetensors, torch.save or TorchScript file")
    net.meta = meta
    return net.to(map_location).eval()


def _check_meta(meta, path):
    if meta.get("format") != "u3d-model":
        raise ValueError(f"{path}: metadata format is '{meta.get('format')}', expected 'u3d-model'")
    if meta.get("format_version") != "1":
        raise ValueError(f"{path}: format_version {meta.get('format_version')} is not supported (this reads 1)")
    for key in ("model", "in_channels", "out_channels"):
        if key not in meta:
            raise ValueError(f"{path}: metadata lacks '{key}'")


# ---------------------------------------------------------------------------------------------
# Preprocessing and prediction (src/data/preprocess.cpp, src/predict/predictor.cpp).

def normalize(image, specs):
    """(C, D, H, W) raw channels (already in meta["channels"] order) -> float32 normalised as in
    training; `specs`: the model's meta (its "normalize", else the stored config's data.normalize)
    or that list itself (one entry for all channels or one per channel)."""
    x = torch.as_tensor(image).to(torch.float32).clone()
    if isinstance(specs, dict):
        specs = json.loads(specs["normalize"]) if "normalize" in specs else config_value(specs, "data.normalize")
    if isinstance(specs, str):
        specs = [specs]
    if len(specs) not in (1, x.shape[0]):
        raise ValueError(f"normalize: {len(specs)} specs for {x.shape[0]} channels")
    for c in range(x.shape[0]):
        spec = str(specs[0] if len(specs) == 1 else specs[c])
        ch = x[c]
        parts = spec.split(":")
        if spec == "none":
            continue
        if spec == "zscore":
            sub = ch.mean().item()
            div = ch.std(unbiased=False).clamp_min(1e-6).item()
        elif spec == "minmax":
            sub = ch.min().item()
            div = max(ch.max().item() - sub, 1e-8)
        elif parts[0] == "clip" and len(parts) == 3:
            lo, hi = float(parts[1]), float(parts[2])
            ch.clamp_(lo, hi)
            sub, div = lo, hi - lo
        elif parts[0] == "scale" and len(parts) == 2:
            sub, div = 0.0, float(parts[1])
        elif parts[0] == "ct" and len(parts) == 5:
            lo, hi, mean, std = (float(p) for p in parts[1:])
            ch.clamp_(lo, hi)
            sub, div = mean, max(std, 1e-8)
        else:
            raise ValueError(f"normalize: '{spec}' is not none|zscore|minmax|clip:LO:HI|scale:S|ct:LO:HI:MEAN:STD")
        # float32 statistics as the trainer's (C++ float) ChannelAffine
        ch.sub_(torch.tensor(sub, dtype=torch.float32)).div_(torch.tensor(div, dtype=torch.float32))
    return x


def window_starts(size, patch, overlap):
    """Window origins along one axis: 0 first, size - patch last, evenly spread, step at most
    patch * (1 - overlap)."""
    if size <= patch:
        return [0]
    step = max(1, int(math.floor(patch * (1.0 - overlap))))
    n = int(math.ceil((size - patch) / step)) + 1
    return [0 if n == 1 else int(math.floor(i * (size - patch) / (n - 1) + 0.5)) for i in range(n)]


def gaussian_importance_map(patch, sigma_fraction=0.125):
    """(d, h, w) float32 Gaussian centred on the patch, sigma = patch * sigma_fraction, max 1,
    clamped away from 0."""
    axes = []
    for p in patch:
        centre = (p - 1.0) / 2.0
        sigma = max(1e-3, p * sigma_fraction)
        x = torch.arange(p, dtype=torch.float64)
        axes.append(torch.exp(-0.5 * ((x - centre) / sigma).square()))
    g = axes[0].view(-1, 1, 1) * axes[1].view(1, -1, 1) * axes[2].view(1, 1, -1)
    g = g / g.max()
    floor = g[g > 0].min().item()
    return g.clamp_min(max(floor, 1e-6)).to(torch.float32)


def _triple(v):
    if isinstance(v, str):
        v = json.loads(v)
    if isinstance(v, (int, float)):
        return [int(v)] * 3
    v = [int(x) for x in v]
    return v * 3 if len(v) == 1 else v


@torch.no_grad()
def predict(model, volume, patch_size=None, overlap=0.5, batch_size=1, gaussian=True, mirror=False, device=None):
    """Sliding-window prediction of a preprocessed (C_in, D, H, W) volume -> (C_out, D, H, W)
    float32, as the trainer's predictor: windows of `patch_size` (default meta["patch_size"], the
    training patch), D-major, evenly spread with at least `overlap`, axes below the patch padded at
    the end with 0, outputs weighted by a Gaussian (sigma = patch / 8) or uniformly, `mirror`: the
    average over all 8 flips (predict.tta: flips). Runs on `device` (default: the model's). A sigmoid
    head (model.head): the windows' and flips' sigmoid probabilities are averaged and returned as
    logits (clamped to [1e-6, 1 - 1e-6]), as the trainer does."""
    meta = getattr(model, "meta", None) or {}
    sigmoid = "model" in meta and _is_sigmoid(model_config(meta))
    if patch_size is None:
        if meta.get("patch_size") in (None, "", "null"):
            raise ValueError("predict: give patch_size (the model has no meta patch_size)")
        patch_size = meta["patch_size"]
    patch = _triple(patch_size)
    divisor = size_divisor(model)
    if any(p % divisor for p in patch):
        raise ValueError(f"predict: patch {patch} does not divide by the network's size divisor {divisor}")
    if device is None:
        params = list(model.parameters())
        device = params[0].device if params else torch.device("cpu")
    was_training = model.training
    model.eval()
    x = torch.as_tensor(volume).to(device=device, dtype=torch.float32)
    if x.dim() != 4:
        raise ValueError(f"predict: expected a (C, D, H, W) volume, got shape {tuple(x.shape)}")
    shape = list(x.shape[1:])
    padded = [max(s, p) for s, p in zip(shape, patch)]
    if padded != shape:
        x = F.pad(x, (0, padded[2] - shape[2], 0, padded[1] - shape[1], 0, padded[0] - shape[0]), value=0.0)
    origins = [(z, y, w) for z in window_starts(padded[0], patch[0], overlap)
               for y in window_starts(padded[1], patch[1], overlap)
               for w in window_starts(padded[2], patch[2], overlap)]
    weight = (gaussian_importance_map(patch) if gaussian else torch.ones(patch)).to(device)
    flips = [[d + 2 for d in range(3) if m & (1 << d)] for m in range(8)] if mirror else [[]]
    total = norm = None
    bs = max(1, int(batch_size))
    for first in range(0, len(origins), bs):
        chunk = origins[first:first + bs]
        batch = torch.stack([x[:, z:z + patch[0], y:y + patch[1], w:w + patch[2]] for z, y, w in chunk])
        if mirror:
            allout = model(torch.cat([torch.flip(batch, d) if d else batch for d in flips])).float()
            allout = torch.sigmoid(allout) if sigmoid else allout
            n = batch.shape[0]
            out = None
            for m, d in enumerate(flips):
                part = allout[m * n:(m + 1) * n]
                part = torch.flip(part, d) if d else part
                out = part if out is None else out + part
            out = out / float(len(flips))
        else:
            out = model(batch).float()
            out = torch.sigmoid(out) if sigmoid else out
        if total is None:
            total = torch.zeros([out.shape[1]] + padded, dtype=torch.float32, device=device)
            norm = torch.zeros(padded, dtype=torch.float32, device=device)
        for i, (z, y, w) in enumerate(chunk):
            total[:, z:z + patch[0], y:y + patch[1], w:w + patch[2]] += out[i] * weight
            norm[z:z + patch[0], y:y + patch[1], w:w + patch[2]] += weight
    model.train(was_training)
    out = (total / norm)[:, :shape[0], :shape[1], :shape[2]]
    return torch.logit(out, eps=1e-6) if sigmoid else out


def finalize(output, meta, threshold=0.5):
    """The task's prediction from predict()'s output: segmentation (D, H, W) uint8 labels (argmax;
    meta["labels"] names them; a sigmoid head: label k where sigmoid(channel k - 1) >= threshold, the
    most probable such channel), dose (D, H, W) float32 in target units (x target_scale)."""
    if meta.get("task") == "segmentation" and "model" in meta and _is_sigmoid(model_config(meta)):
        top, channel = torch.sigmoid(output.float()).max(0)
        return ((channel + 1) * (top >= threshold)).to(torch.uint8)
    if meta.get("task") == "segmentation":
        return output.argmax(0).to(torch.uint8)
    return (output[0] * float(meta.get("target_scale", 1.0))).to(torch.float32)
