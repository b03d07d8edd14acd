#!/usr/bin/env python3
"""Top kernels of one PyTorch training step (pytorch_step.py's network and step: every --arch and
option it takes), by GPU time, from the PyTorch profiler. Only the timed steps are profiled: --warmup
steps run first without the profiler (cuDNN's autotuning trials happen there), then the profiler's
schedule skips one more step (wait) and discards one (its own warm-up) before it records --steps
steps, each inside a record_function range "u3d.timed_step"; kernels are summed over the recorded
steps only. Prints the profiler table (to stderr) and one JSON line {"benchmark": "kernels", "tool":
"pytorch-eager", "top": [{"name", "gpu_ms", "share", "calls"}, ...], "profiled_steps": N}.

    python3 scripts/bench/profile_step.py --filters 64 --batch 2 --size 128 --steps 3 --top 15
    python3 scripts/bench/profile_step.py --arch unet --dims 2 --levels 5 --max-filters 512 --norm batch \
        --activation relu --deep-supervision 0 --out-channels 1 --loss bce_dice --optimizer adamw \
        --size 256 --batch 128 --precision fp16 --steps 3 --top 25       # the 2D slice recipe
"""
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_step import make_parser, make_step, parse_args  # noqa: E402

RANGE = "u3d.timed_step"


def make_profile_parser():
    p = make_parser()
    p.set_defaults(steps=3, warmup=3)
    p.add_argument("--top", type=int, default=15)
    return p


def profile_steps(a):
    """The kernels JSON (a dict) for parsed options `a`."""
    dev = torch.device(a.device)
    step, _, _ = make_step("eager", a)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    for _ in range(a.warmup):  # autotuning and allocations: outside the profiler
        step()
    sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts, schedule=schedule(wait=1, warmup=1, active=a.steps)) as prof:
        for _ in range(2 + a.steps):
            with record_function(RANGE):
                step()
            sync()
            prof.step()
    key = "self_device_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    averages = prof.key_averages()
    events = [e for e in averages if getattr(e, key, 0) > 0 and e.key != RANGE]
    if dev.type == "cuda":  # kernels only: events that ran on the device, not CPU-side ops
        events = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA] or events
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    total = sum(getattr(e, key) for e in events) or 1
    ranges = next((e.count for e in averages if e.key == RANGE), 0)
    print(averages.table(sort_by=key, row_limit=a.top), file=sys.stderr)
    top = [{"name": e.key, "gpu_ms": getattr(e, key) / 1e3 / a.steps, "share": getattr(e, key) / total,
            "calls": e.count // a.steps} for e in events[:a.top]]
    return {"benchmark": "kernels", "tool": "pytorch-eager", "device": str(dev), "steps": a.steps,
            "profiled_steps": ranges, "warmup_steps_unprofiled": a.warmup + 2,
            "time_per_step_ms": total / 1e3 / a.steps, "top": top}


def main():
    print(json.dumps(profile_steps(parse_args(parser=make_profile_parser()))))


if __name__ == "__main__":
    main()
