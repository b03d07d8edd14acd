"""Sections 6 (captured-step variants: data-parallel NCCL at world size 1 and fp16), 7 (the GPU data
benchmark) and 8 (the profile: the PyTorch step's kernels over the timed steps only; the trainer's
with ncu when it is there)."""
import csv
import io
import os
import shutil
import socket

from . import estimates as E
from .runner import ROOT
from .sections_step import KBP_CFG, STEPS, WARMUP, bench, figures, judge_step
from .sections_tests import Spec

DIST_KEYS = ("world_size", "dist_backend", "gradient_bytes", "buckets", "step_ms_median", "local_step_ms",
             "allreduce_ms", "exposed_ms", "hidden_share", "scaling_efficiency", "samples_per_s", "cuda_graph")
NCU_COUNT, NCU_WARMUP = 400, 3  # launches profiled inside the NVTX range "u3d.timed_steps"; warm-up steps


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Variants(Spec):
    num, sid, title = 7, "nccl-fp16", "Data-parallel NCCL (world size 1) with the captured step; the fp16 captured step"

    def estimate(self, check):
        t = 2 * E.trainer_bench("openkbp", STEPS, WARMUP, True) + E.trainer_bench("openkbp", STEPS, WARMUP, False)
        return t, "3 OpenKBP-baseline benchmarks: NCCL graph off and on, fp16 graph on"

    def run(self, check, s):
        # World size 1 set up as torchrun would (RANK, WORLD_SIZE, ...): no launcher process, no torch import.
        env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}
        sets = ["training.loss=l1", "training.precision=bf16"]
        for graph in ("off", "on"):
            key = f"nccl_graph_{graph}"
            try:
                env["MASTER_PORT"] = str(free_port())
                r = bench(check, s, KBP_CFG, sets + [f"training.cuda_graph={graph}"], STEPS, WARMUP, key, env=env)
                s.figures[key] = {k: r.get(k) for k in DIST_KEYS}
                if r.get("dist_backend") != "nccl" or r.get("world_size") != 1:
                    s.fail(f"{key}: backend {r.get('dist_backend')}, world size {r.get('world_size')} "
                           "(expected nccl, 1)")
                judge_step(s, key, r, graph == "on")
            except RuntimeError as ex:
                s.fail(f"{key}: {ex}")
        # fp16 with dynamic loss scaling, captured: only timed steps may not be skipped (the scale's
        # calibration skips during warm-up are ordinary and reported apart).
        try:
            r = bench(check, s, KBP_CFG, ["training.loss=l1", "training.precision=fp16", "training.cuda_graph=on"],
                      STEPS, WARMUP, "fp16-graph")
            s.figures["fp16_graph_on"] = figures(check, r)
            judge_step(s, "fp16 graph on", r, True)
            if "warmup_skipped_steps" not in r:
                s.notes.append("the trainer's JSON has no warmup_skipped_steps: skipped_steps may count warm-up skips")
        except RuntimeError as ex:
            s.fail(f"fp16: {ex}")


class DataBench(Spec):
    num, sid, title = 8, "data", "--benchmark data: gpu and pinned placements, 128^3, batch 2, flips / affine"

    def estimate(self, check):
        k = E.H100
        run = k["trainer_start"] + k["data_rows"] * k["data_row"]
        first = k["import_openkbp"] if check.args.openkbp else k["synth_128"]
        return first + 2 * run, f"data {first:.0f} s; 2 runs of {k['data_rows']} rows x {k['data_row']:.0f} s"

    def run(self, check, s):
        if check.args.openkbp:
            from .sections_openkbp import openkbp_import
            try:
                _, path = openkbp_import(check, s)
            except RuntimeError as ex:
                s.fail(str(ex))
                return
            cfg = os.path.join(ROOT, "configs", "openkbp.yaml")
            s.figures["dataset"] = "OpenKBP sample (--openkbp), 11 channels (CT + 10 structures), 128^3"
        else:
            path, cfg = check.synth(s, "phantom128.h5", 128, 8), os.path.join(ROOT, "configs", "quickstart.yaml")
            s.figures["dataset"] = "dose phantoms (trainer synth), 5 channels, 128^3"
            s.notes.append("5 channels, not OpenKBP's 11: `trainer synth` makes 5-channel phantoms; give --openkbp")
        for aug in ("flips", "affine"):
            cmd = check.trainer + ["--config", cfg, "--benchmark", "data", "--benchmark-seconds",
                                   str(int(E.H100["data_row"])), "--workers", "1,4", "--set", f"data.path={path}",
                                   "--set", "data.patch_size=128", "--set", "data.batch_size=2",
                                   "--set", f"experiment.output_dir={check.work}/runs",
                                   "--set", "augment.flip_prob=0.5" if aug == "flips" else "augment.affine_prob=0.5"]
            rc, out = check.run(s, cmd, timeout=300, log_name=aug)
            r = check.json_lines(out, "data")
            if rc != 0 or not r:
                s.fail(f"{aug}: --benchmark data exit {rc}: {check.last_line(out)}")
                continue
            rows = {f"{x['placement']}/{x['stage']}/{x['workers']}t":
                    round(1000 / x["batches_per_s"], 2) if x.get("batches_per_s") else None for x in r[-1]["results"]}
            s.figures[f"ms_per_batch_{aug}"] = rows
            for want in ("gpu", "pinned"):
                if not any(k.startswith(want + "/") for k in rows):
                    s.fail(f"{aug}: placement {want} not measured")


def ncu_top(out, top=15):
    """Per-kernel GPU time from `ncu --csv --metrics gpu__time_duration.sum`, summed by kernel name."""
    lines = out.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return None, 0
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3}
    by, launches = {}, 0
    for row in csv.DictReader(io.StringIO("\n".join(l for l in lines[start:] if l.startswith('"')))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            ms = float(row["Metric Value"].replace(",", "")) * scale.get(row.get("Metric Unit", "").strip(), 1e-6)
        except (KeyError, ValueError):
            continue
        name = row.get("Kernel Name", "?")
        t, n = by.get(name, (0.0, 0))
        by[name] = (t + ms, n + 1)
        launches += 1
    total = sum(t for t, _ in by.values()) or 1.0
    rows = sorted(by.items(), key=lambda kv: kv[1][0], reverse=True)[:top]
    return [{"name": k[:120], "gpu_ms": round(t, 3), "share": round(t / total, 3), "launches": n}
            for k, (t, n) in rows], launches


class Profile(Spec):
    num, sid, title = 9, "profile", "Profile: top kernels of the timed steps (PyTorch profiler; ncu for the trainer)"

    def ncu(self):
        return shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",) if os.access(p, os.X_OK)), None)

    def estimate(self, check):
        k = E.H100
        t = E.torch_start(check) + E.torch_step("openkbp", 5, 3, k["profile_factor"])
        return t + (k["ncu"] if self.ncu() else 0.0), "PyTorch profiler over 3 timed steps" + (
            f"; ncu over {NCU_COUNT} launches" if self.ncu() else "")

    def run(self, check, s):
        try:
            r = check.torch_side(s).request(s, "profile", timeout=300,
                                            argv=["--device", "cuda", "--filters", "64", "--batch", "2", "--size", "128", "--steps", "3",
                                                  "--warmup", "3", "--top", "15"])
            s.figures["pytorch_eager_top"] = r["top"]
            s.figures["pytorch_eager_gpu_ms_per_step"] = r.get("time_per_step_ms")
            s.figures["profiled_steps"] = r.get("profiled_steps")
        except RuntimeError as ex:
            s.fail(f"PyTorch profile: {ex}")
        ncu = self.ncu()
        if not ncu:
            s.partial("trainer kernels not measured: ncu (Nsight Compute) is not on PATH")
            return
        # Eager steps (ncu does not attribute a graph replay's kernels per launch); only kernels inside
        # the benchmark's NVTX start/end range "u3d.timed_steps" (step_benchmark.cpp; no trailing slash:
        # not a push/pop range, which would leave out the backward's kernels, launched from autograd's
        # device thread), so none of the warm-up's cuDNN autotune trials.
        # --clock-control none: the clocks the timed runs had (ncu locks them to base clock by default).
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--nvtx", "--nvtx-include", "u3d.timed_steps", "--launch-count",
               str(NCU_COUNT), "--csv", "--metrics", "gpu__time_duration.sum"] + check.trainer + [
               "--config", KBP_CFG, "--benchmark", "--steps", "3", "--warmup", str(NCU_WARMUP),
               "--set", "training.cuda_graph=off", "--set", "training.loss=l1"]
        rc, out = check.run(s, cmd, timeout=600, log_name="ncu")
        top, launches = ncu_top(out)
        if "ERR_NVGPUCTRPERM" in out:
            s.partial("trainer kernels: ncu lacks permission for the GPU performance counters (ERR_NVGPUCTRPERM)")
        elif rc != 0 or not top:
            s.partial(f"trainer kernels: ncu exit {rc}, {launches} kernel rows: {check.last_line(out)}")
        else:
            s.figures["trainer_ncu_top"] = top
            s.figures["trainer_ncu_launches"] = launches
            s.notes.append(f"trainer kernels: ncu over the first {NCU_COUNT} launches of the timed steps (NVTX range "
                           f"u3d.timed_steps) of an eager benchmark (kernels serialised by ncu: shares, not time)")
