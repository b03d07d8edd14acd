"""Reading an export: model.safetensors (with the `safetensors` package when installed, else a built-in
reader), model.pt, model.ts and trainer checkpoints; load() gives the network in eval mode with `.meta`."""

from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import torch

from .config import _yaml_section
from .networks import build


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
