#!/usr/bin/env python3
"""The OpenKBP baseline network and training step in PyTorch, for a side-by-side with
`trainer --benchmark` on the same GPU (scripts/bench/compare.sh).

Same network as model.architecture: openkbp_baseline (the challenge's provided U-Net), same step:
MAE loss without a mask (run the trainer with training.loss=l1 to match), AdamW (fused), bf16
autocast, channels_last_3d, cudnn.benchmark. Variants: eager and torch.compile. Prints a line and
one JSON line per variant with the keys that `trainer --benchmark` prints ({"benchmark": "step",
"tool": "pytorch-eager", "step_ms_median": ..., "flops_per_step": ...}), so scripts/bench/compare.py
can put the two side by side. FLOPs are counted by forward hooks with the rule the trainer's
count_conv_flops() uses (2 x multiply-adds of every convolution; training = 3 x forward).
PyTorch is a benchmark here, never a dependency of the trainer.

    python3 scripts/bench/pytorch_step.py --filters 64 --batch 2 --size 128 --steps 50 --warmup 10
    python3 scripts/bench/pytorch_step.py --device cpu --filters 4 --size 32 --steps 3   # smoke test
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class OpenKbpBaseline(nn.Module):
    """Six 4x4x4 stride-2 'same' convolutions down (f, 2f, 4f, 8f, 8f, 8f; no bias; BN momentum
    0.01 eps 1e-3 except the last; LeakyReLU 0.2), five 4x4x4 stride-2 transposed convolutions up
    (8f, 8f, 4f, 2f, f; no bias; BN; channel dropout 0.2 on the 2nd and 4th; ReLU), the 2nd to 5th
    taking the concatenation with the matching encoder output, then a final transposed convolution
    (bias) of [up5, enc1] to 1 channel, 3x3x3 average pooling (stride 1, 'same', padding left out of
    the average) and ReLU. 116,975,361 parameters at f = 64 with 11 input channels."""

    def __init__(self, in_channels=11, f=64):
        super().__init__()
        enc = [f, 2 * f, 4 * f, 8 * f, 8 * f, 8 * f]
        self.down = nn.ModuleList()
        self.down_bn = nn.ModuleList()
        prev = in_channels
        for i, c in enumerate(enc):
            self.down.append(nn.Conv3d(prev, c, 4, stride=2, padding=1, bias=False))
            self.down_bn.append(nn.BatchNorm3d(c, momentum=0.01, eps=1e-3) if i < 5 else nn.Identity())
            prev = c
        dec = [8 * f, 8 * f, 4 * f, 2 * f, f]
        skips = [None, enc[4], enc[3], enc[2], enc[1]]
        self.up = nn.ModuleList()
        self.up_bn = nn.ModuleList()
        prev = enc[5]
        for c, s in zip(dec, skips):
            cin = prev + (s or 0)
            self.up.append(nn.ConvTranspose3d(cin, c, 4, stride=2, padding=1, bias=False))
            self.up_bn.append(nn.BatchNorm3d(c, momentum=0.01, eps=1e-3))
            prev = c
        self.drop = nn.Dropout3d(0.2)
        self.final = nn.ConvTranspose3d(prev + enc[0], 1, 4, stride=2, padding=1, bias=True)

    def forward(self, x):
        e = []
        for conv, bn in zip(self.down, self.down_bn):
            x = F.leaky_relu(bn(conv(x)), 0.2)
            e.append(x)
        y = e[5]
        for i, (conv, bn) in enumerate(zip(self.up, self.up_bn)):
            if i > 0:
                y = torch.cat([y, e[5 - i]], dim=1)
            y = bn(conv(y))
            if i in (1, 3):
                y = self.drop(y)
            y = F.relu(y)
        y = self.final(torch.cat([y, e[0]], dim=1))
        y = F.avg_pool3d(y, 3, stride=1, padding=1, count_include_pad=False)
        return F.relu(y)


def conv_flops(model, x):
    """FLOPs of one forward pass (2 * multiply-adds of every convolution), by hooks."""
    total = 0

    def hook(mod, inp, out):
        nonlocal total
        k = mod.weight.shape[2] * mod.weight.shape[3] * mod.weight.shape[4]
        if isinstance(mod, nn.ConvTranspose3d):  # weight (C_in, C_out, k, k, k): every input voxel
            total += 2 * inp[0].numel() * mod.weight.shape[1] * k
        else:  # weight (C_out, C_in, k, k, k): every output voxel
            total += 2 * out.numel() * mod.weight.shape[1] * k
    hs = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d))]
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    return total


def run(variant, args):
    dev = torch.device(args.device)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    model = OpenKbpBaseline(11, args.filters).to(dev)
    mf = torch.channels_last_3d if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=mf)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.5, 0.999), fused=(dev.type == "cuda"))
    shape = (args.batch, 11, args.size, args.size, args.size)
    x = torch.rand(shape, device=dev).to(memory_format=mf)
    y = torch.rand((args.batch, 1, args.size, args.size, args.size), device=dev).to(memory_format=mf)
    flops_fwd = conv_flops(model, x)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.precision]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = (model(x) - y).abs().mean()
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(step) if variant == "compile" else step
    for _ in range(args.warmup):
        fn()
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = statistics.median(times)
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]
    flops_step = 3 * flops_fwd  # forward + backward (2x forward)
    return {
        "benchmark": "step", "tool": f"pytorch-{variant}", "torch": torch.__version__, "device": str(dev),
        "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else None,
        "precision": args.precision, "channels_last": args.channels_last, "batch": args.batch,
        "patch": [args.size] * 3, "filters": args.filters, "steps": args.steps,
        "step_ms_median": med, "step_ms_p10": q(0.1), "step_ms_p90": q(0.9),
        "samples_per_s": args.batch * 1e3 / med,
        "peak_gpu_mem_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_reserved_bytes": torch.cuda.max_memory_reserved() if dev.type == "cuda" else None,
        "peak_gpu_allocated_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
        "flops_per_step": flops_step, "tflops": flops_step / (med * 1e-3) / 1e12,
        "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--filters", type=int, default=64)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="bf16")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--variants", default="eager,compile")
    args = p.parse_args()
    for variant in args.variants.split(","):
        r = run(variant, args)
        print(f"{r['tool']:>16}: step {r['step_ms_median']:.2f} ms (p10 {r['step_ms_p10']:.2f}, p90 "
              f"{r['step_ms_p90']:.2f}), {r['samples_per_s']:.1f} samples/s, {r['tflops']:.1f} TFLOP/s, "
              f"peak {(r['peak_gpu_mem_bytes'] or 0) / 2**30:.2f} GiB")
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
