#!/usr/bin/env python3
"""Side by side on one device: `trainer --benchmark` and the same training step in PyTorch
(scripts/bench/pytorch_step.py, eager and torch.compile), back to back in one call, then the ratio.

    python3 scripts/bench/compare.py --config configs/openkbp_baseline.yaml --filters 64
    python3 scripts/bench/compare.py --config my.yaml --filters 4 --steps 3 --warmup 1 --variants eager  # CPU smoke

The trainer runs first; its JSON line gives the batch, patch, in-channels, precision and layout the
PyTorch variants then use, so both time the same work. The trainer side is run with
training.loss=l1 (PyTorch's step is an unmasked MAE). --filters must be the config's base filter
count (the PyTorch model is the OpenKBP baseline network: compare with an openkbp_baseline config).
Prints every JSON line it got, a table, and one JSON line {"benchmark": "compare", ...} whose
"speedup_vs_best_pytorch" is the best PyTorch median step time over the trainer's (> 1: faster).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "openkbp_baseline.yaml"))
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "release", "trainer"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--variants", default="eager,compile")
    p.add_argument("--set", action="append", default=[], help="extra trainer --set overrides")
    args = p.parse_args()

    cmd = [args.trainer, "--config", args.config, "--benchmark", "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--set", "training.loss=l1"]
    for s in args.set:
        cmd += ["--set", s]
    ours = json_lines(run(cmd))
    if len(ours) != 1:
        sys.exit("trainer --benchmark printed no JSON line")
    ours = ours[0]
    patch = ours["patch"]
    if len(set(patch)) != 1:
        sys.exit(f"pytorch_step.py takes cubic patches; the config's patch is {patch}")
    device = "cuda" if ours["device"].startswith("cuda") else "cpu"
    cmd = [args.python, os.path.join(HERE, "pytorch_step.py"), "--device", device, "--filters", str(args.filters),
           "--batch", str(ours["batch"]), "--size", str(patch[0]), "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--precision", ours["precision"], "--variants", args.variants]
    if not ours["channels_last"]:
        cmd.append("--no-channels-last")
    theirs = json_lines(run(cmd))
    if not theirs:
        sys.exit("pytorch_step.py printed no JSON line")

    rows = [ours] + theirs
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
    print(json.dumps({"benchmark": "compare", "device": ours["device"], "gpu": ours.get("gpu"),
                      "commit": ours.get("commit"), "trainer_ms": ours["step_ms_median"],
                      "best_pytorch": best["tool"], "best_pytorch_ms": best["step_ms_median"],
                      "speedup_vs_best_pytorch": ratio}))


if __name__ == "__main__":
    main()
