"""Preprocessing and prediction as the trainer does them (src/data/preprocess.cpp,
src/predict/predictor.cpp): normalize(), the sliding window of predict() with Gaussian importance
weights, and finalize()."""

from __future__ import annotations

import json
import math

import torch
import torch.nn.functional as F

from .config import _is_sigmoid, _triple, config_value, model_config
from .networks import size_divisor


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
