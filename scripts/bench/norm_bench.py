#!/usr/bin/env python3
"""A network's normalisation + activation layers timed alone, three ways (issue 53: cuDNN's fused norm +
ReLU beside the project's kernels, picked by measurement): this script finds every norm layer of the
network (pytorch_step.py's build: every --arch and option it takes, the PyTorch mirror of the trainer's
network) with its input shape at the step's batch and the activation the trainer fuses after it, writes
them as SITES.json, and runs `trainer bench-norm SITES.json` (app/norm_benchmark.h), which times ATen
(the trainer with model.fused_kernels off), the project's kernels and cuDNN's graphs on the same tensors.

Layers of one kind, shape, activation, eps and momentum are one site, counted as often as the network has
them. Group norm layers are counted but not timed (neither cuDNN's graphs nor this benchmark take them).
Prints the trainer's table (stderr) and one JSON line, the trainer's with the network's name added:

    {"benchmark": "norm", "architecture": "...", "batch": 2, "precision": "bf16", "layers": 22,
     "sum_ms": {"aten": 4.1, "ours": 2.2, "cudnn": 2.9}, "sum_sites": {...}, "sites": [...], ...}

    python3 scripts/bench/norm_bench.py --trainer build/release/trainer --arch mlperf_unet3d --size 128 --batch 2
    python3 scripts/bench/norm_bench.py --trainer build/release/trainer --filters 64 --batch 2  # OpenKBP baseline
    python3 scripts/bench/norm_bench.py --device cpu --arch unet --levels 2 --base-filters 4 --size 16 \\
        --batch 1 --precision fp32 --steps 1 --warmup 0                            # CPU smoke test
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conv_floor import collect  # noqa: E402
from pytorch_step import build, in_channels, make_parser, parse_args, run_script  # noqa: E402

BATCH = (nn.BatchNorm2d, nn.BatchNorm3d)
INSTANCE = (nn.InstanceNorm2d, nn.InstanceNorm3d)
NORMS = BATCH + INSTANCE + (nn.GroupNorm,)


def activation_of(model, name, parents):
    """(activation, negative slope) the trainer fuses after norm layer `name` (model/*.cpp): the block's
    own (ConvBlock, the MLPerf blocks: "none" where the block does not activate, as a residual block's
    second convolution), the OpenKBP baseline's LeakyReLU(0.2) down and ReLU up."""
    if type(model).__name__ == "OpenKbpBaseline":
        return ("leaky_relu", 0.2) if name.startswith("down") else ("relu", 0.0)
    block = parents.get(name)
    if block is None or not hasattr(block, "activation"):
        return "none", 0.0
    if not getattr(block, "activate", True) or getattr(block, "plain", False):
        return "none", 0.0
    act = block.activation
    return act, float(getattr(block, "negative_slope", 0.01)) if act == "leaky_relu" else 0.0


def sites(args):
    """(sites, layers, group norm layers) of the network at the step's batch."""
    torch.manual_seed(0)
    model = build(args)
    x = torch.zeros(args.batch, in_channels(args), *args.shape)
    names = {m: n for n, m in model.named_modules()}
    parents = {}
    for pname, p in model.named_modules():
        for cname, _ in p.named_children():
            parents[f"{pname}.{cname}" if pname else cname] = p
    found = collect(model, x, deep=getattr(args, "deep_supervision", 0) == 1, types=NORMS)
    merged, groups = {}, 0
    for mod, shape in found:
        if isinstance(mod, nn.GroupNorm):
            groups += 1
            continue
        act, slope = activation_of(model, names[mod], parents)
        site = {"norm": "batch" if isinstance(mod, BATCH) else "instance", "shape": list(shape), "activation": act,
                "negative_slope": slope, "eps": float(mod.eps),
                "momentum": float(mod.momentum if mod.momentum is not None else 0.1)}
        key = json.dumps(site, sort_keys=True)
        merged.setdefault(key, dict(site, count=0))["count"] += 1
    return list(merged.values()), len(found), groups


def trainer_command(args):
    if args.trainer:
        return [args.trainer]
    env = os.environ.get("U3D_TRAINER")
    found = env or shutil.which("trainer")
    if not found:
        raise RuntimeError("no trainer: pass --trainer PATH (or set U3D_TRAINER)")
    return [found]


def run(args):
    """The trainer's bench-norm JSON for the network, with its name, batch and patch."""
    found, layers, groups = sites(args)
    if not found:
        raise RuntimeError(f"--arch {args.arch}: the network has no batch or instance norm layer to time")
    with tempfile.TemporaryDirectory(prefix="norm_bench.") as tmp:
        path = os.path.join(tmp, "sites.json")
        with open(path, "w") as f:
            json.dump({"precision": args.precision, "sites": found}, f)
        cmd = trainer_command(args) + ["bench-norm", path, "--steps", str(args.steps), "--warmup",
                                       str(args.warmup), "--device", "cuda" if args.device.startswith("cuda") else "cpu"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=args.timeout)
        sys.stderr.write(p.stderr)
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"trainer bench-norm exit {p.returncode}: {last}")
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError("trainer bench-norm printed no JSON line")
        result = json.loads(lines[-1])
    if sum(s["count"] for s in result["sites"]) + groups != layers:
        raise RuntimeError(f"the trainer timed {result['layers']} layers of the network's {layers}")
    return dict({"benchmark": "norm", "architecture": args.arch, "batch": args.batch, "patch": list(args.shape),
                 "norm_layers": layers, "group_norm_layers_not_timed": groups}, **result)


def make_norm_parser():
    """pytorch_step.py's options, fewer repetitions, --trainer and --timeout (torch_side.py's requests too)."""
    p = make_parser()
    p.set_defaults(steps=20, warmup=5)
    p.add_argument("--trainer", default="", help="the trainer to run (default: U3D_TRAINER, else trainer on PATH)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for trainer bench-norm")
    return p


def main():
    run_script("norm_bench.py", make_norm_parser(), run, errors=(RuntimeError, subprocess.TimeoutExpired))


if __name__ == "__main__":
    main()
