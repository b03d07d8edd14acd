#!/usr/bin/env python3
"""Side by side on one device: `trainer --benchmark` and the same training step in PyTorch
(scripts/bench/pytorch_step.py, eager and torch.compile), back to back in one call, then the ratio.

    python3 scripts/bench/compare.py --config configs/openkbp_baseline.yaml --filters 64
    python3 scripts/bench/compare.py --config my.yaml --filters 4 --steps 3 --warmup 1 --variants eager  # CPU smoke

    python3 scripts/bench/compare.py --config configs/segmentation_nnunet_like.yaml --set data.path=seg.h5

The trainer runs first; its JSON line gives the batch, patch, in- and out-channels, precision and
layout the PyTorch variants then use, so both time the same work. The PyTorch network follows the
config's model.architecture:
- openkbp_baseline: the trainer side is run with training.loss=l1 (PyTorch's step is an unmasked
  MAE); --filters must be the config's base filter count.
- unet, resenc_unet, mlperf_unet3d (model.preset mlperf_unet3d, configs/mlperf_unet3d.yaml: the
  MLPerf 3D U-Net; pytorch_step.py --arch mlperf_unet3d): the model.* and training.* keys as the trainer resolved them (its JSON's
  "resolved" member: presets applied; activation checkpointing and accumulate_steps included)
  become pytorch_step.py --arch unet|resenc's options; a segmentation dataset must be
  given (data.path: `trainer synth --task segmentation` will do; only its header is read) so that
  the trainer's loss is Dice + CE with the dataset's classes.
The two networks must have the same parameter count (checked: exit 1 otherwise; FLOPs per step are
compared too). Prints every JSON line it got, a table, and one JSON line {"benchmark": "compare",
...} whose "speedup_vs_best_pytorch" is the best PyTorch median step time over the trainer's (> 1:
faster).
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_args import Parser  # noqa: E402  (one line and exit 2 for a bad argument)


def json_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{") and '"benchmark": "step"' in line:
            out.append(json.loads(line))
    return out


def run(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout)
        sys.exit(f"command failed with exit code {p.returncode}: {' '.join(cmd)}")
    return p.stdout


def config_sections(path, overrides):
    """The flat scalar keys of the config's `model:` and `training:` sections, then the --set
    overrides: {"model.levels": "6", ...} (values as text, comments dropped). Standard library only,
    so a deliberately small reader: top-level `name:` lines open a section, `  key: value` lines in it."""
    keys, section = {}, None
    with open(path) as f:
        for line in f:
            text = line.split("#", 1)[0].rstrip()
            if not text.strip():
                continue
            if not text.startswith(" "):
                section = text.rstrip(":").strip()
                continue
            if section in ("model", "training") and ":" in text and text.startswith("  ") and text[2] != " ":
                k, v = text.strip().split(":", 1)
                keys[f"{section}.{k.strip()}"] = v.strip()
    for o in overrides:
        if "=" in o:
            k, v = o.split("=", 1)
            keys[k.strip()] = v.strip()
    return keys


UNET_DEFAULTS = {  # include/u3d/core/config.h ModelConfig / TrainingConfig defaults
    "model.levels": "4", "model.base_filters": "16", "model.max_filters": "320", "model.convs_per_level": "2",
    "model.kernel_size": "3", "model.norm": "instance", "model.activation": "leaky_relu",
    "model.negative_slope": "0.01", "model.dropout": "0", "model.deep_supervision": "false",
    "training.optimizer": "adamw", "training.lr": "1e-3", "training.momentum": "0.99", "training.nesterov": "true",
    "training.weight_decay": "1e-4", "training.grad_clip_norm": "0", "training.loss": "auto",
    "model.blocks_per_level": "[]", "model.activation_checkpointing": "off", "training.accumulate_steps": "1",
    "model.dims": "3", "model.head": "softmax",
}


def unet_args(keys, arch="unet"):
    """pytorch_step.py --arch unet options for the config keys; exits when the config uses what the
    PyTorch mirror does not have (mlperf_unet3d: relu, as the reference)."""
    k = dict(UNET_DEFAULTS)
    k.update(keys)
    boolean = lambda v: "1" if v.lower() in ("true", "on", "yes", "1") else "0"
    unsupported = []
    if k["model.norm"] not in ("instance", "none") and not (arch == "unet" and k["model.norm"] == "batch"):
        unsupported.append(f"model.norm {k['model.norm']}")
    if k["model.activation"] not in ("relu", "leaky_relu") or (arch != "unet" and k["model.activation"] !=
                                                                ("relu" if arch == "mlperf_unet3d" else "leaky_relu")):
        unsupported.append(f"model.activation {k['model.activation']}")
    if k["training.optimizer"] not in ("sgd", "adamw"):
        unsupported.append(f"training.optimizer {k['training.optimizer']}")
    sigmoid = k["model.head"] == "sigmoid"
    loss = k["training.loss"].replace(" ", "")
    # A term list as written ([bce, dice]) or as the trainer resolves it ([{name: bce, weight: 1}, ...]).
    names = re.findall(r"name:(\w+)", loss) or [t for t in loss.strip("[]").split(",") if t]
    weights = [float(w) for w in re.findall(r"weight:([-+.\deE]+)", loss)]
    terms = "auto" if loss == "auto" else ",".join(names) if all(w == 1 for w in weights) else loss
    if not (terms in ("dice_ce", "auto") and not sigmoid) and not (sigmoid and terms in ("auto", "bce,dice")):
        unsupported.append(f"training.loss {k['training.loss']} (model.head {k['model.head']})")
    if unsupported:
        sys.exit("compare.py: the PyTorch U-Net mirrors norm instance|none (unet: batch too), leaky_relu (unet: relu "
                 "too), sgd|adamw, and dice_ce (softmax) or [bce, dice] (sigmoid) only; this config has " + ", ".join(unsupported))
    return ["--levels", k["model.levels"], "--base-filters", k["model.base_filters"],
            "--max-filters", k["model.max_filters"], "--convs-per-level", k["model.convs_per_level"],
            "--kernel-size", k["model.kernel_size"], "--norm", k["model.norm"],
            "--negative-slope", k["model.negative_slope"], "--dropout", k["model.dropout"],
            "--deep-supervision", boolean(k["model.deep_supervision"]), "--lr", k["training.lr"],
            "--momentum", k["training.momentum"], "--nesterov", boolean(k["training.nesterov"]),
            "--weight-decay", k["training.weight_decay"], "--grad-clip-norm", k["training.grad_clip_norm"],
            "--blocks-per-level", k["model.blocks_per_level"].strip("[]").replace(" ", ""),
            "--checkpointing", k["model.activation_checkpointing"], "--accumulate", k["training.accumulate_steps"],
            "--optimizer", k["training.optimizer"], "--loss", "bce_dice" if sigmoid else "dice_ce"] + (
        ["--activation", k["model.activation"], "--dims", k["model.dims"]] if arch == "unet" else [])


def stage_args(keys, arch, slice_axis):
    """--kernel-sizes / --strides for model.kernel_sizes / model.strides (per-stage D,H,W triples; for
    model.dims 2 the slice axis, `slice_axis`, dropped); none when the config leaves them empty."""
    argv = []
    for key, option in (("model.kernel_sizes", "--kernel-sizes"), ("model.strides", "--strides")):
        text = str(keys.get(key, "")).replace(" ", "")
        if text in ("", "[]", "null", "~"):
            continue
        if arch != "unet":
            sys.exit(f"compare.py: {key} is mirrored for model.architecture unet only; this config's is {arch}")
        stages = json.loads(text)
        if slice_axis is not None:
            stages = [[v for a, v in enumerate(t) if a != slice_axis] for t in stages]
        argv += [option, ";".join(",".join(str(v) for v in t) for t in stages)]
    return argv


def pytorch_argv(ours, keys, filters, steps, warmup, variants):
    """pytorch_step.py's options for the step the trainer's JSON line `ours` timed (config keys
    `keys`, its "resolved" member applied): same batch, patch, channels, precision and layout.
    gpu-check sends the same options to its torch process (scripts/bench/torch_side.py)."""
    arch = ours.get("architecture", keys.get("model.architecture", "unet"))
    patch = ours["patch"]
    flat = str(ours.get("resolved", {}).get("model.dims", keys.get("model.dims", "3"))) == "2" and 1 in patch
    slice_axis = patch.index(1) if flat else None  # model.dims 2: the axis of size 1
    if flat:
        patch = [n for a, n in enumerate(patch) if a != slice_axis]
    if len(set(patch)) != 1 and arch != "unet":
        sys.exit(f"pytorch_step.py's {arch} takes cubic patches; the config's patch is {ours['patch']}")
    device = "cuda" if ours["device"].startswith("cuda") else "cpu"
    argv = ["--device", device, "--filters", str(filters), "--batch", str(ours["batch"]),
            "--size", ",".join(str(n) for n in patch),
            "--steps", str(steps), "--warmup", str(warmup), "--precision", ours["precision"], "--variants", variants,
            "--in-channels", str(ours["in_channels"])]
    if arch in ("unet", "resenc_unet", "mlperf_unet3d"):
        argv += ["--arch", {"unet": "unet", "resenc_unet": "resenc", "mlperf_unet3d": "mlperf_unet3d"}[arch],
                 "--out-channels", str(ours["out_channels"])]
        argv += unet_args(keys, arch)
        argv += stage_args(keys, arch, slice_axis)
    if not ours["channels_last"]:
        argv.append("--no-channels-last")
    return argv


def main():
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "openkbp_baseline.yaml"))
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "release", "trainer"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--variants", default="eager,compile")
    p.add_argument("--set", action="append", default=[], help="extra trainer --set overrides")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU: intra-op threads on both sides (trainer training.threads, torch.set_num_threads); 0: each "
                        "side's default")
    p.add_argument("--trainer-graph", choices=["config", "both"], default="config",
                   help="both: also run the trainer with training.cuda_graph off (CUDA only; the first run keeps "
                        "the config's setting and is the one the ratios use)")
    args = p.parse_args()
    for name, low in (("filters", 1), ("steps", 1), ("warmup", 0), ("threads", 0)):
        p.at_least(args, name, low)
    for flag, path in (("--config", args.config), ("--trainer", args.trainer)):
        if not os.path.isfile(path):
            p.error(f"{flag} {path}: no such file")
    variants = args.variants.split(",")
    if not variants or any(v not in ("eager", "compile") for v in variants):
        p.error(f"--variants {args.variants}: expected eager and/or compile, separated by ','")

    keys = config_sections(args.config, args.set)
    arch = keys.get("model.architecture", "unet")
    cmd = [args.trainer, "--config", args.config, "--benchmark", "--steps", str(args.steps), "--warmup",
           str(args.warmup)] + (["--set", "training.loss=l1"] if arch == "openkbp_baseline" else [])
    for s in args.set:
        cmd += ["--set", s]
    if args.threads > 0:
        cmd += ["--set", f"training.threads={args.threads}"]
    ours = json_lines(run(cmd))
    if len(ours) != 1:
        sys.exit("trainer --benchmark printed no JSON line")
    ours = ours[0]
    extra = []  # more trainer rows (--trainer-graph both)
    if args.trainer_graph == "both" and ours["device"].startswith("cuda"):
        extra = json_lines(run(cmd + ["--set", "training.cuda_graph=off"]))
        for r in extra:
            r["tool"] = r.get("tool", "trainer") + "-nograph"
    keys.update(ours.get("resolved", {}))  # the trainer's resolved keys (model.preset applied) win
    arch = ours.get("architecture", arch)
    cmd = [args.python, os.path.join(HERE, "pytorch_step.py")]
    cmd += pytorch_argv(ours, keys, args.filters, args.steps, args.warmup, args.variants)
    if args.threads > 0:
        cmd += ["--threads", str(args.threads)]
    theirs = json_lines(run(cmd))
    if not theirs:
        sys.exit("pytorch_step.py printed no JSON line")

    rows = [ours] + extra + theirs
    for r in rows:
        print(json.dumps(r))
    print(f"{'tool':>16} {'median ms':>10} {'p10':>9} {'p90':>9} {'samples/s':>10} {'TFLOP/s':>8} {'peak GiB':>9}")
    for r in rows:
        peak = r.get("peak_gpu_mem_bytes")
        print(f"{r['tool']:>16} {r['step_ms_median']:>10.3f} {r['step_ms_p10']:>9.3f} {r['step_ms_p90']:>9.3f} "
              f"{r['samples_per_s']:>10.2f} {r['tflops']:>8.2f} {(peak or 0) / 2**30:>9.2f}")
    best = min(theirs, key=lambda r: r["step_ms_median"])
    ratio = best["step_ms_median"] / ours["step_ms_median"]
    if ours["flops_per_step"] != best["flops_per_step"]:
        print(f"warning: FLOPs per step differ (trainer {ours['flops_per_step']}, {best['tool']} "
              f"{best['flops_per_step']}): not the same network or patch", file=sys.stderr)
    print(f"trainer vs best PyTorch ({best['tool']}): {ratio:.3f}x the throughput")
    params_equal = all(r["parameters"] == ours["parameters"] for r in theirs)
    print(json.dumps({"benchmark": "compare", "device": ours["device"], "gpu": ours.get("gpu"),
                      "commit": ours.get("commit"), "architecture": arch, "parameters": ours["parameters"],
                      "pytorch_parameters": best["parameters"], "parameters_equal": params_equal,
                      "flops_equal": ours["flops_per_step"] == best["flops_per_step"],
                      "trainer_ms": ours["step_ms_median"], "best_pytorch": best["tool"],
                      "best_pytorch_ms": best["step_ms_median"], "speedup_vs_best_pytorch": ratio,
                      "ratios": {r["tool"]: r["step_ms_median"] / ours["step_ms_median"] for r in theirs}}))
    if not params_equal:
        sys.exit(f"parameter counts differ: trainer {ours['parameters']}, PyTorch "
                 f"{[r['parameters'] for r in theirs]}: not the same network")


if __name__ == "__main__":
    main()
