#!/usr/bin/env python3
"""gpu-check's PyTorch side in one process: torch is imported once, then requests arrive on stdin,
one JSON object a line, and each answer leaves on stdout as one JSON line; everything else the
process prints goes to stderr (gpu-check streams it into a log).

    {"id": 1, "op": "roofline", "n": 8192, "copy_gib": 2, "reps": 5}          -> roofline.py's JSON
    {"id": 2, "op": "step", "argv": ["--filters", "64", ...]}                 -> pytorch_step.py's JSON lines
    {"id": 3, "op": "profile", "argv": ["--steps", "3", ...]}                 -> profile_step.py's JSON
    {"id": 4, "op": "conv_floor", "argv": [...pytorch_step.py's options]}     -> conv_floor.py's JSON
    {"id": 5, "op": "norm_bench", "argv": [... and --trainer PATH]}           -> norm_bench.py's JSON
    {"id": 6, "op": "quit"}
Answers: {"id": N, "ok": true, "result": ...} or {"id": N, "ok": false, "error": "one line"}. The
first line, unasked: {"id": 0, "ok": true, "result": {"torch": ..., "cuda_available": ...,
"import_s": ...}}. After each request the CUDA cache is emptied, so the trainer's runs between two
requests find the GPU's memory free.
"""
import json
import os
import sys
import time

t0 = time.time()
answers = os.fdopen(os.dup(1), "w")  # the answers' channel; fd 1 itself now goes to stderr
os.dup2(2, 1)
sys.stdout = sys.stderr

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def answer(rid, ok, payload):
    answers.write(json.dumps({"id": rid, "ok": ok, ("result" if ok else "error"): payload}) + "\n")
    answers.flush()


def handle(req):
    op = req.get("op")
    if op == "roofline":
        import roofline
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
        return roofline.measure(req.get("n", 8192), req.get("copy_gib", 2.0), req.get("reps", 5))
    if op == "step":
        import pytorch_step
        args = pytorch_step.parse_args(req["argv"])
        out = []
        for variant in args.variants.split(","):
            r = pytorch_step.run(variant, args)
            print(json.dumps(r), flush=True)
            out.append(r)
        return out
    if op == "conv_floor":
        import conv_floor
        return conv_floor.floor(conv_floor.parse_args(req["argv"], parser=conv_floor.make_floor_parser()))
    if op == "norm_bench":
        import norm_bench
        return norm_bench.run(norm_bench.parse_args(req["argv"], parser=norm_bench.make_norm_parser()))
    if op == "profile":
        import profile_step
        return profile_step.profile_steps(profile_step.parse_args(req["argv"], parser=profile_step.make_profile_parser()))
    raise ValueError(f"unknown op {op!r}")


def main():
    cuda = torch.cuda.is_available()
    if cuda:
        torch.zeros(1, device="cuda")  # the context now, so import_s holds its cost
    answer(0, True, {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": cuda,
                     "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                     "capability": "sm_{}{}".format(*torch.cuda.get_device_capability(0)) if cuda else None,
                     "cudnn": torch.backends.cudnn.version(), "import_s": round(time.time() - t0, 2)})
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            answer(req.get("id"), True, None)
            return
        print(f"[torch_side] request {json.dumps(req)}", flush=True)
        t = time.time()
        try:
            res = handle(req)
            print(f"[torch_side] done in {time.time() - t:.1f} s", flush=True)
            answer(req.get("id"), True, res)
        except (Exception, SystemExit) as ex:  # argparse exits on bad options: an answer, not an exit
            msg = f"{type(ex).__name__}: {ex}".splitlines()[0][:400]
            print(f"[torch_side] failed after {time.time() - t:.1f} s: {msg}", flush=True)
            answer(req.get("id"), False, msg)
        finally:
            import gc
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
