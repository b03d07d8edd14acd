#!/usr/bin/env python3
"""The roofline gpu-check judges the step figures against: measured dense bf16 matmul TFLOP/s and
device memory bandwidth (a device-to-device copy: read + write bytes / time). One JSON line
{"benchmark": "roofline", "gpu", "bf16_tflops", "bandwidth_gb_s", ...}. Needs CUDA (exit 3 without).

    python3 scripts/bench/roofline.py [--n 8192] [--copy-gib 2]
"""
import argparse
import json
import sys
import time

import torch


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(n=8192, copy_gib=2.0, reps=10):
    """The roofline's JSON (a dict); also what scripts/bench/torch_side.py returns for it."""
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    inner = 10
    t = timed(lambda: [torch.mm(x, y) for _ in range(inner)], reps) / inner
    tflops = 2 * n ** 3 / t / 1e12
    elems = int(copy_gib * 2 ** 30 / 4)
    src = torch.empty(elems, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    tc = timed(lambda: dst.copy_(src), reps)
    bw = 2 * elems * 4 / tc / 1e9
    props = torch.cuda.get_device_properties(0)
    return {"benchmark": "roofline", "gpu": props.name, "memory_bytes": props.total_memory,
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "bf16_tflops": tflops, "bandwidth_gb_s": bw, "matmul_n": n, "copy_bytes": elems * 4}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--copy-gib", type=float, default=2.0)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("roofline.py: no CUDA device", file=sys.stderr)
        sys.exit(3)
    print(json.dumps(measure(a.n, a.copy_gib, a.reps)))


if __name__ == "__main__":
    main()
