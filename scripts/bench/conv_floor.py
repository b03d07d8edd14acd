#!/usr/bin/env python3
"""The convolution floor of a network's training step (issue 53): every convolution of the network
(pytorch_step.py's build: every --arch and option it takes) timed alone, forward, data gradient and
weight gradient, at the step's batch, layout (channels-last by default) and precision (autocast
bf16 or fp16, or fp32), with cuDNN autotuning; summed per step. The first convolution's data
gradient is left out (a training step never computes the gradient of its input). A step can be no
faster than this sum on that device unless the convolutions themselves get faster (another
algorithm, a fused epilogue): "non-convolution time" = step time - floor.

Convolutions of one shape (the same input shape, channels, kernel, stride, padding, dilation,
groups and transposedness) are timed once and counted as often as the network has them. Times are
medians over --steps after --warmup runs (CUDA events on a GPU, the wall clock on the CPU).
Prints a table of the most expensive shapes (stderr) and one JSON line:

    {"benchmark": "conv_floor", "architecture": "...", "batch": 2, "precision": "bf16",
     "channels_last": true, "device": "cuda", "gpu": "...", "convolutions": 36, "shapes": 20,
     "floor_ms": 38.2, "forward_ms": ..., "dgrad_ms": ..., "wgrad_ms": ..., "top": [...],
     "space_to_depth": null | {"convolutions": 6, "strided_ms": ..., "s2d_ms": ..., "max_rel_diff": ...}}

"space_to_depth" times the stride-2 4x4x4 convolutions (the OpenKBP baseline's) a second time as
space-to-depth + stride-1 convolutions (space_to_depth.py): whether that rewrite pays, measured before
the trainer has it.

    python3 scripts/bench/conv_floor.py --arch mlperf_unet3d --size 128 --batch 2 --precision bf16
    python3 scripts/bench/conv_floor.py --filters 64 --batch 2 --size 128            # OpenKBP baseline
    python3 scripts/bench/conv_floor.py --device cpu --arch unet --levels 2 --base-filters 4 --size 16 \\
        --batch 1 --precision fp32 --steps 1 --warmup 0                            # CPU smoke test
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_step import build, in_channels, make_parser, parse_args, run_script  # noqa: E402
from space_to_depth import S2dConv3d, candidate  # noqa: E402

CONVS = (nn.Conv3d, nn.ConvTranspose3d, nn.Conv2d, nn.ConvTranspose2d)


def collect(model, x, deep, types=CONVS):
    """[(module, input shape)] of every convolution (every module of `types`) in the order the step's
    forward pass reaches them (forward_deep with deep supervision, as pytorch_step.py's step)."""
    found = []
    fwd = (lambda m, t: m.forward_deep(t)) if deep and hasattr(model, "forward_deep") else (lambda m, t: m(t))
    hooks = [m.register_forward_hook(lambda mod, inp, out: found.append((mod, tuple(inp[0].shape))))
             for m in model.modules() if isinstance(m, types)]
    # Training mode: the deep-supervision heads run as in a step (on a throwaway copy of the
    # network: its batch-norm statistics may move). Eval mode where PyTorch refuses a 1-voxel
    # instance norm in training (tiny test sizes only).
    try:
        with torch.no_grad():
            fwd(model.train(), x)
    except ValueError:
        found.clear()
        with torch.no_grad():
            fwd(model.eval(), x)
    for h in hooks:
        h.remove()
    return found


def key_of(mod, shape):
    return (type(mod).__name__, shape, mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding,
            mod.dilation, mod.groups, mod.output_padding if mod.transposed else None, mod.bias is not None)


def timer(dev):
    """A function that runs fn `n` times and returns the median milliseconds of one run."""
    def run(fn, n):
        times = []
        for _ in range(n):
            if dev.type == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)
    return run


def time_conv(mod, shape, args, dev, first, s2d=False):
    """(forward, data-gradient, weight-gradient) milliseconds of convolution `mod` alone on input `shape`;
    with `s2d`, of its space-to-depth form instead (space_to_depth.py: the fold's copies included), and a
    fourth value: that form's largest difference from the convolution, relative to its largest output."""
    conv = type(mod)(mod.in_channels, mod.out_channels, mod.kernel_size, stride=mod.stride, padding=mod.padding,
                     dilation=mod.dilation, groups=mod.groups, bias=mod.bias is not None,
                     **({"output_padding": mod.output_padding} if mod.transposed else {})).to(dev)
    fmt = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    if args.channels_last:
        conv = conv.to(memory_format=fmt)
    x = torch.randn(shape, device=dev)
    if args.channels_last:
        x = x.contiguous(memory_format=fmt)
    x.requires_grad_(True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    ctx = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype else (lambda: torch.autocast(dev.type, enabled=False))
    net, weight, diff = conv, conv.weight, None
    if s2d:
        net = S2dConv3d(conv)
        weight = net.conv.weight
        with torch.no_grad(), ctx():
            ref, got = conv(x).float(), net(x).float()
        diff = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item()
    with ctx():
        y = net(x)
    gy = torch.randn_like(y)
    run = timer(dev)
    n_warm, n = args.warmup, max(1, args.steps)

    def forward():
        with ctx():
            net(x)

    def dgrad():
        torch.autograd.grad(y, x, gy, retain_graph=True)

    def wgrad():
        torch.autograd.grad(y, weight, gy, retain_graph=True)

    out = []
    for fn, needed in ((forward, True), (dgrad, not first), (wgrad, True)):
        if not needed:
            out.append(0.0)
            continue
        if n_warm:
            run(fn, n_warm)
        out.append(run(fn, n))
    return tuple(out) + ((diff,) if s2d else ())


def floor(args):
    dev = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = build(args).to(dev)
    x = torch.zeros(args.batch, in_channels(args), *args.shape, device=dev)
    found = collect(model, x, deep=getattr(args, "deep_supervision", 0) == 1)  # the step's forward
    shapes = {}
    for i, (mod, shape) in enumerate(found):
        k = key_of(mod, shape)
        if k not in shapes:
            shapes[k] = {"module": mod, "shape": shape, "count": 0, "first": i == 0}
        shapes[k]["count"] += 1
    rows = []
    for k, s in shapes.items():
        f, d, w = s["times"] = time_conv(s["module"], s["shape"], args, dev, s["first"])
        rows.append({"op": k[0], "input": list(s["shape"]), "out_channels": k[3], "kernel": list(k[4]),
                     "stride": list(k[5]), "count": s["count"], "forward_ms": f, "dgrad_ms": d, "wgrad_ms": w,
                     "total_ms": s["count"] * (f + d + w)})
    s2d = space_to_depth_rows(shapes, args, dev)
    rows.sort(key=lambda r: r["total_ms"], reverse=True)
    total = {part: sum(r["count"] * r[part + "_ms"] for r in rows) for part in ("forward", "dgrad", "wgrad")}
    for r in rows[:args.top]:
        print(f"{r['op']:>16} {str(r['input']):>28} -> {r['out_channels']:>4} k{r['kernel']} s{r['stride']} "
              f"x{r['count']}: fwd {r['forward_ms']:.3f} dgrad {r['dgrad_ms']:.3f} wgrad {r['wgrad_ms']:.3f} ms",
              file=sys.stderr)
    return {"benchmark": "conv_floor", "tool": "pytorch", "architecture": args.arch, "batch": args.batch,
            "patch": list(args.shape), "precision": args.precision, "channels_last": args.channels_last,
            "device": str(dev), "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
            "torch": torch.__version__, "convolutions": len(found), "shapes": len(rows),
            "floor_ms": round(sum(total.values()), 4), "forward_ms": round(total["forward"], 4),
            "dgrad_ms": round(total["dgrad"], 4), "wgrad_ms": round(total["wgrad"], 4),
            "steps": args.steps, "warmup": args.warmup, "top": rows[:args.top], "space_to_depth": s2d}


def space_to_depth_rows(shapes, args, dev):
    """The stride-2 4x4x4 convolutions (the OpenKBP baseline's down-sampling) timed again as
    space-to-depth + stride-1 2x2x2 convolutions: per step, both sums (forward + data gradient + weight
    gradient, the first convolution without its data gradient; the strided ones as floor() timed them)
    and the largest difference; None when the network has no such convolution."""
    rows = [s for s in shapes.values() if candidate(s["module"])]
    if not rows:
        return None
    strided = rewritten = worst = 0.0
    for s in rows:
        f, d, w = s["times"]
        f2, d2, w2, diff = time_conv(s["module"], s["shape"], args, dev, s["first"], s2d=True)
        strided += s["count"] * (f + d + w)
        rewritten += s["count"] * (f2 + d2 + w2)
        worst = max(worst, diff)
        print(f"  space-to-depth {s['shape']}: fwd {f:.3f} -> {f2:.3f}, dgrad {d:.3f} -> {d2:.3f}, "
              f"wgrad {w:.3f} -> {w2:.3f} ms (difference {diff:.1e})", file=sys.stderr)
    return {"convolutions": sum(s["count"] for s in rows), "strided_ms": round(strided, 4),
            "s2d_ms": round(rewritten, 4), "max_rel_diff": worst}


def make_floor_parser():
    """pytorch_step.py's options, fewer repetitions, and --top (torch_side.py parses its requests with it)."""
    p = make_parser()
    p.set_defaults(steps=20, warmup=5)
    p.add_argument("--top", type=int, default=10)
    return p


def main():
    run_script("conv_floor.py", make_floor_parser(), floor)


if __name__ == "__main__":
    main()
