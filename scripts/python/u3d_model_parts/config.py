"""The model.* keys of an export (include/u3d/core/config.h, docs/config.md) and the export's metadata:
model_config() fills in the C++ defaults and checks the types; decoded_meta() and config_value() read
the metadata and the stored config YAML."""

from __future__ import annotations

import json

DEFAULTS = {
    "architecture": "unet",
    "dims": 3,  # 2: the 2D U-Net on slices across slice_axis (Conv2d; kernels and strides 1 on that axis)
    "slice_axis": 0,  # with dims 2: 0 D (axial), 1 H, 2 W
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
    "activation_checkpointing": "off",  # off | encoder | all: torch.utils.checkpoint block by block in training
}
ARCHITECTURES = ("unet", "resenc_unet", "openkbp_baseline", "mlperf_unet3d")
NORMS = ("batch", "instance", "group", "none")
ACTIVATIONS = ("relu", "leaky_relu", "gelu", "elu")
OUTPUT_ACTIVATIONS = ("none", "relu", "sigmoid")
CHECKPOINTING = ("off", "encoder", "all")
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
    for k in ("dims", "slice_axis", "levels", "base_filters", "max_filters", "convs_per_level", "kernel_size",
              "norm_groups"):
        cfg[k] = int(cfg[k])
    for k in ("negative_slope", "dropout"):
        cfg[k] = float(cfg[k])
    cfg["deep_supervision"] = _as_bool(cfg["deep_supervision"])
    if cfg["activation_checkpointing"] is False:  # a YAML 1.1 reader's `off`
        cfg["activation_checkpointing"] = "off"
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
                         ("output_activation", OUTPUT_ACTIVATIONS), ("activation_checkpointing", CHECKPOINTING)):
        cfg[key] = str(cfg[key])
        if cfg[key] not in allowed:
            raise ValueError(f"model.{key}: '{cfg[key]}' is not one of {', '.join(allowed)}")
    return cfg


def stage_geometry(cfg):
    """(kernels, strides): one (D, H, W) triple per stage (core/stage_geometry.h): model.kernel_sizes and
    model.strides, else kernel_size everywhere and stride 1, 2, 2, ...; with dims 2 the slice axis's
    entries are 1."""
    n = cfg["levels"]
    kernels = [tuple(k) for k in cfg["kernel_sizes"]] or [tuple(_triple(cfg["kernel_size"]))] * n
    strides = [tuple(s) for s in cfg["strides"]] or [(1, 1, 1)] + [(2, 2, 2)] * (n - 1)
    if len(kernels) != n or len(strides) != n:
        raise ValueError(f"model.kernel_sizes / model.strides: expected {n} stages (model.levels)")
    if cfg["dims"] == 2:
        axis = cfg["slice_axis"]
        kernels = [tuple(1 if a == axis else v for a, v in enumerate(k)) for k in kernels]
        strides = [tuple(1 if a == axis else v for a, v in enumerate(s)) for s in strides]
    return kernels, strides


def _is_sigmoid(cfg):
    return str(cfg.get("head", "softmax")) == "sigmoid"

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


def _triple(v):
    if isinstance(v, str):
        v = json.loads(v)
    if isinstance(v, (int, float)):
        return [int(v)] * 3
    v = [int(x) for x in v]
    return v * 3 if len(v) == 1 else v


