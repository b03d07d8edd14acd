"""The speed script's sections (scripts/bench/speed.sh, issue 53), run by gpu-check's loop, deadline
and report. Section 1 says what the machine is (GPU, H100 or H200, driver, torch, the trainer's
commit); section 2 runs our kernels' GPU tests and says per family whether they passed on this GPU
(gpucheck/speed_kernels.py). Then, per network, each row a step at one batch: the trainer with the CUDA graph and
model.fused_kernels on (with `--benchmark --profile`: the step's breakdown by category), PyTorch's
torch.compile and eager of the same network (pytorch_step.py in the one torch process), the trainer
with model.fused_kernels off (profiled too: the report compares each category fused against unfused,
so a kernel slower than ATen's path shows), and the convolution floor (conv_floor.py) with its share of the step;
last, the network's norm layers timed alone three ways (norm_bench.py: ATen, our kernels, cuDNN's graphs).
Part 1: the OpenKBP baseline (3) and the MLPerf 3D U-Net (4) at batch 2 and at its best batch of
2, 4, 7, 8 (gpu-check section 15's sweep); part 2: the nnU-Net-like U-Net (5) and the 2D slice recipe
(6) at batch 16 and 128; both parts run sections 1 and 2. torch.compile costs about 100 s per network, hence two parts, each planned
within 540 s of the H100 estimates. Within a section each item starts only when its estimate fits
the time left (a PARTIAL names what did not); the report is rewritten after every command and ends
with a table ready for docs/performance.md. Without CUDA the sections are SKIPPED; the OpenKBP
baseline rehearses its plumbing on the CPU at a tiny size (never a speed figure)."""
import os
import shlex
import sys
import time

from . import estimates as E
from .runner import ROOT
from .sections_step import KBP_CFG, MLPERF_CFG, NNUNET_CFG, SWEEP_BATCHES, SWEEP_STEPS, SWEEP_WARMUP, bench, \
    mirror_argv, pytorch
from .sections_tests import Facts, Spec
from .speed_kernels import KernelTests, kernels_rows
from .speed_tables import cell, fused_vs_unfused, norm_figures, norms_rows, space_to_depth_rows

SLICES_CFG = os.path.join(ROOT, "configs", "slices_2d.yaml")
NVIDIA_MLPERF = {"H100": 72.2, "H200": 76.0}  # samples/s per GPU, MLPerf Training v4.0 3D U-Net (docs/performance.md)
MLPERF_GOAL = {"H100": 80.0, "H200": 84.0}    # samples/s per GPU, the MLPerf 3D U-Net at its best batch
COMPILE_GOAL = 1.2                            # the trainer's fused step over torch.compile's, per network
SLICES_GOAL = 3000.0                          # slices/s, the 2D recipe at its best batch
OPENKBP_GOAL_MS = 9.0                         # the OpenKBP baseline's step at batch 2 on an H100
STEPS, WARMUP = 20, 5                         # timed and untimed steps of every row
FLOOR_STEPS, FLOOR_WARMUP = 10, 3             # conv_floor.py's repetitions per convolution
NORM_STEPS, NORM_WARMUP = 20, 5               # norm_bench.py's (trainer bench-norm) runs per layer and way
PROFILE_STEPS = 3                             # --benchmark --profile's profiled steps, after the timed ones
PARTS = {"1": (1, 2, 3, 4), "2": (1, 2, 5, 6), "all": (1, 2, 3, 4, 5, 6)}
FUSED = {"on": "model.fused_kernels=on", "off": "model.fused_kernels=off"}
TOOLS = {"fused": "trainer, graph, fused kernels on", "unfused": "trainer, graph, fused kernels off",
         "compile": "PyTorch torch.compile", "eager": "PyTorch eager", "nofused": "trainer, graph (no fused_kernels key)"}


def gpu_class(name):
    """"H100" | "H200" | None (another GPU: no NVIDIA figure, no goal of its own)."""
    up = (name or "").upper()
    return "H200" if "H200" in up else "H100" if "H100" in up else None


class Machine(Facts):
    num, sid, title = 1, "machine", "Machine: GPU (H100 or H200), driver, torch, trainer commit"
    with_tests = False

    def estimate(self, check):
        k = E.H100
        return k["trainer_start"] + 2.0 + k["torch_import"], "trainer --version; nvidia-smi and the launcher 2 s; torch import"

    def cpu_estimate(self, check):
        k = E.CPU
        return k["trainer_start"] + 1.0 + k["torch_import"], "trainer --version, the launcher, torch import"

    def run(self, check, s):
        super().run(check, s)
        figs = s.figures if check.cuda else s.rehearsal_figures
        figs["gpu_class"] = gpu_class(check.gpu_name)
        if not check.shared.get("python_has_torch"):
            (s.fail if check.cuda else s.rehearsal_fail)(f"no torch in {check.python} for the PyTorch side (U3D_PYTHON)")
            return
        try:
            info = check.torch_side(s).info
            figs.update({"torch": info.get("torch"), "torch_cuda": info.get("cuda"), "cudnn": info.get("cudnn"),
                         "torch_device": info.get("device")})
        except RuntimeError as ex:
            (s.fail if check.cuda else s.rehearsal_fail)(f"PyTorch side: {ex}")


def row_of(kind, batch, r):
    peak = r.get("peak_gpu_mem_bytes")
    return {"tool": TOOLS[kind], "kind": kind, "batch": batch, "samples_per_s": r.get("samples_per_s"),
            "ms_median": r.get("step_ms_median"), "ms_p10": r.get("step_ms_p10"), "ms_p90": r.get("step_ms_p90"),
            "tflops": r.get("tflops"), "peak_gib": round(peak / 2 ** 30, 2) if peak else None,
            "cuda_graph": r.get("cuda_graph")}


class NetSpeed(Spec):
    """One network: its rows at each batch, in the order of their value."""
    net, name, cfg = "", "", ""   # the estimates' key (openkbp, nnunet, mlperf, slices), the table's name
    batches = (2,)
    tiny = None                   # --set list of the CPU rehearsal (None: no rehearsal)

    def step_s(self, b):
        return E.H100["step_" + self.net] * b / 2

    def compile_s(self):
        return E.H100["compile"]

    def data_s(self):
        return E.H100["synth_small"]

    def sets(self, check, s):
        """The --set list of every row (a dataset made here when the benchmark needs one)."""
        return []

    def item_s(self, kind, b):
        k, n = E.H100, STEPS + WARMUP
        tune, step = k["autotune_" + self.net], self.step_s(b)
        start = k["trainer_start"] + tune + k["capture"]
        profiled = PROFILE_STEPS * step * k["profile_factor"] + 1.0
        return {"fused": start + n * step + profiled, "unfused": start + n * step + profiled, "eager": tune + n * step, "compile": self.compile_s() + tune + n * step,
                "floor": tune + k["conv_floor_extra"], "norms": k["norm_bench"],
                "sweep": start + (SWEEP_STEPS + SWEEP_WARMUP) * step}[kind]

    def items(self):
        """[(kind, batch)] in the order they run: the step rows, then the norm layers three ways (ATen, ours,
        cuDNN: norm_bench.py) at the last batch."""
        return self.step_items() + [("norms", self.batches[-1])]

    def step_items(self):
        out = []
        for b in self.batches:
            out += [("fused", b), ("compile", b), ("unfused", b), ("eager", b), ("floor", b)]
        return out

    def estimates(self):
        return [(kind, b, self.item_s(kind, b if b != "best" else max(SWEEP_BATCHES))) for kind, b in self.items()]

    def estimate(self, check):
        items = self.estimates()
        text = ", ".join(f"{kind} b{b} {t:.0f} s" for kind, b, t in items)
        return self.data_s() + sum(t for _, _, t in items), f"data {self.data_s():.0f} s; {text}"

    def first_estimate(self, check):
        return self.data_s() + self.estimates()[0][2]

    def planned(self, check, left):
        t = 0.0
        if self.first_estimate(check) > left:
            return 0.0
        for _, _, est in [("data", 0, self.data_s())] + self.estimates():
            if t + est <= left:
                t += est
        return t

    def cpu_estimate(self, check):
        return None if self.tiny is None else (25.0, "the tiny trainer rows, PyTorch eager and the floor on the CPU")

    def run(self, check, s):
        self.go(check, s, s.figures, gpu=True)

    def rehearse(self, check, s):
        figs = s.rehearsal_figures
        self.go(check, s, figs, gpu=False)
        if s.rehearsal == "RUNNING":
            kinds = {r["kind"] for r in figs.get("rows", [])}
            s.rehearsal_verdict([f"no {k} row" for k, ok in (
                ("trainer", kinds & {"fused", "nofused"}), ("PyTorch eager", "eager" in kinds),
                ("profile", figs.get("profiles")), ("convolution floor", figs.get("conv_floor")),
                ("norm layers", figs.get("norms"))) if not ok])

    def go(self, check, s, figs, gpu):
        figs["network"] = self.name
        rows, got = figs.setdefault("rows", []), {}
        problem = s.fail if gpu else s.rehearsal_fail
        try:
            base = self.sets(check, s) if gpu else self.tiny
        except RuntimeError as ex:
            problem(f"{self.name}: {ex}")
            return
        try:
            for kind, b, est in self.estimates():
                if b == "best":
                    b = self.best(got)
                if not gpu and (kind in ("compile", "sweep") or b != self.batches[0]):
                    continue  # the rehearsal: the first batch, no torch.compile
                if gpu and not check.fits(est):
                    s.partial(f"{kind} at batch {b} not run: {check.no_fit_reason(est)}")
                    continue
                try:
                    r = self.item(check, s, figs, kind, b, base, got, gpu)
                except RuntimeError as ex:
                    problem(f"{self.name} {kind} batch {b}: {ex}")
                    continue
                if r is not None:
                    rows.append(r)
                    print(f"[speed] {self.name} batch {b}, {r['tool']}: {r['samples_per_s']} samples/s, "
                          f"{r['ms_median']} ms", file=sys.stderr, flush=True)
        finally:
            figs["goals"] = self.goals(check, figs, got)
            check.write_report()

    def item(self, check, s, figs, kind, b, base, got, gpu):
        """Runs one item; its row (None for the floor, which goes to figs["conv_floor"])."""
        sets = base + [f"data.batch_size={b}"] + (["training.cuda_graph=on"] if gpu else [])
        log = f"{self.sid}-b{b}-{kind}"
        steps, warmup = (SWEEP_STEPS, SWEEP_WARMUP) if kind == "sweep" else (STEPS, WARMUP) if gpu else (2, 1)
        if kind in ("fused", "sweep", "unfused"):
            if kind == "unfused" and got.get(("nofused", b)):
                s.notes.append(f"batch {b}: no fused-off row (this trainer has no model.fused_kernels)")
                return None
            want = "off" if kind == "unfused" else "on"
            try:
                r = bench(check, s, self.cfg, sets + [FUSED[want]], steps, warmup, log,
                          profile=kind in ("fused", "unfused"))
            except RuntimeError as ex:
                if "fused_kernels" not in str(ex):
                    raise
                s.notes.append(f"batch {b}: the trainer refused model.fused_kernels ({ex}); timed without it")
                r = bench(check, s, self.cfg, sets, steps, warmup, log + "-nokey", profile=kind == "fused")
                got[("nofused", b)] = r
                kind = "nofused"
            got[(kind, b)] = r
            if r.get("profile"):  # the fused step's under "profiles", the unfused one's beside it to compare
                p = r["profile"]
                figs.setdefault("unfused_profiles" if kind == "unfused" else "profiles", {})[str(b)] = {
                    "total_ms_per_step": p.get("total_ms_per_step"), "source": p.get("source"),
                    "categories": {k: v.get("ms") for k, v in (p.get("categories") or {}).items()}}
            return row_of("fused" if kind == "sweep" else kind, b, r)
        ours = got.get(("fused", b)) or got.get(("nofused", b)) or got.get(("unfused", b))
        if ours is None:
            raise RuntimeError("no trainer step at this batch to mirror")
        if kind == "floor":
            argv = mirror_argv(ours, self.cfg, sets, *((FLOOR_STEPS, FLOOR_WARMUP) if gpu else (1, 0)))
            f = check.torch_side(s).request(s, "conv_floor", timeout=600, argv=argv)
            step = ours.get("step_ms_median")
            figs.setdefault("conv_floor", {})[str(b)] = {
                "floor_ms": f.get("floor_ms"), "convolutions": f.get("convolutions"),
                "share_of_trainer_step": round(f["floor_ms"] / step, 3) if step and f.get("floor_ms") else None,
                "space_to_depth": f.get("space_to_depth")}
            got[("floor", b)] = f
            return None
        if kind == "norms":
            argv = mirror_argv(ours, self.cfg, sets, *((NORM_STEPS, NORM_WARMUP) if gpu else (1, 0)))
            timeout = max(10.0, min(300.0, check.left() - 10.0))
            n = check.torch_side(s).request(s, "norm_bench", timeout=timeout + 30.0,
                                            argv=argv + ["--trainer", check.trainer[0], "--timeout", f"{timeout:.0f}"])
            figs.setdefault("norms", {})[str(b)] = norm_figures(n)
            return None
        r = pytorch(check, s, ours, self.cfg, sets, *((STEPS, WARMUP) if gpu else (1, 0)), variants=kind)
        if r.get("parameters") != ours.get("parameters"):
            s.notes.append(f"batch {b}: PyTorch's network has {r.get('parameters')} parameters, the trainer's "
                           f"{ours.get('parameters')}")
        got[(kind, b)] = r
        return row_of(kind, b, r)

    def best(self, got):
        return None

    def goals(self, check, figs, got):
        """[{"goal", "figure", "met"}] of this network: the trainer's fused step against torch.compile."""
        out = []
        for b in self.batches:
            f, c = got.get(("fused", b)) or got.get(("nofused", b)), got.get(("compile", b))
            if f and c and f.get("step_ms_median") and c.get("step_ms_median"):
                ratio = c["step_ms_median"] / f["step_ms_median"]
                out.append({"goal": f"{self.name} batch {b}: >= {COMPILE_GOAL}x torch.compile",
                            "figure": f"{ratio:.2f}x", "met": ratio >= COMPILE_GOAL})
            else:
                out.append({"goal": f"{self.name} batch {b}: >= {COMPILE_GOAL}x torch.compile",
                            "figure": "not measured", "met": None})
        return out


class OpenKbpSpeed(NetSpeed):
    num, sid, title = 3, "openkbp", "OpenKBP baseline (128^3, batch 2, bf16): fused, torch.compile, unfused, eager, floor, norms"
    net, name, cfg = "openkbp", "OpenKBP baseline", KBP_CFG
    tiny = ["training.loss=l1", "training.device=cpu", "model.base_filters=2", "data.patch_size=64"]

    def data_s(self):
        return 0.0

    def item_s(self, kind, b):  # its floor times the stride-2 convolutions again as space-to-depth
        return super().item_s(kind, b) + (E.H100["s2d_extra"] if kind == "floor" else 0.0)

    def sets(self, check, s):
        return ["training.loss=l1", "training.precision=bf16"]

    def goals(self, check, figs, got):
        out = super().goals(check, figs, got)
        f = got.get(("fused", 2)) or got.get(("nofused", 2))
        ms = f.get("step_ms_median") if f else None
        out.append({"goal": f"OpenKBP baseline step <= {OPENKBP_GOAL_MS:g} ms (H100)",
                    "figure": "not measured" if ms is None else f"{ms:.2f} ms", "met": None if ms is None else
                    ms <= OPENKBP_GOAL_MS})
        return out


class MlperfSpeed(NetSpeed):
    num, sid, title = 4, "mlperf", "MLPerf 3D U-Net (128^3, bf16): batch 2 and its best of 2, 4, 7, 8"
    net, name, cfg = "mlperf", "MLPerf 3D U-Net", MLPERF_CFG

    def data_s(self):
        return E.H100["synth_kits"]

    def sets(self, check, s):
        kits = check.synth(s, "kits128.h5", 128, 4, task="kits")
        return [f"data.path={kits}", "training.precision=bf16"]

    def step_items(self):
        # at the best batch its fused row and its floor (the convolutions' share where the figure is
        # quoted): its fused-off and eager rows (40 s) gave way to the kernels' tests (section 2)
        # within the part's 540 s; batch 2 has every row
        return super().step_items() + [("sweep", b) for b in SWEEP_BATCHES if b != 2] + [("floor", "best")]

    def best(self, got):
        runs = {b: r.get("samples_per_s") or 0 for (kind, b), r in got.items() if kind in ("fused", "nofused", "sweep")}
        return max(runs, key=runs.get) if runs else 2

    def item(self, check, s, figs, kind, b, base, got, gpu):
        if (kind, b) in got:
            return None  # the best batch is one measured already (batch 2)
        r = super().item(check, s, figs, kind, b, base, got, gpu)
        if ("sweep", b) in got:  # a fused row at a batch of the sweep
            got[("fused", b)] = got.pop(("sweep", b))
        return r

    def goals(self, check, figs, got):
        out = super().goals(check, figs, got)
        cls = gpu_class(check.gpu_name) or "H100"
        b = self.best(got)
        f = got.get(("fused", b)) or got.get(("nofused", b))
        sps = f.get("samples_per_s") if f else None
        figs["best_batch"] = b if f else None
        out.append({"goal": f"MLPerf 3D U-Net >= {MLPERF_GOAL[cls]:g} samples/s per {cls} (best batch)",
                    "figure": "not measured" if sps is None else
                    f"{sps:.1f} samples/s at batch {b} ({sps / NVIDIA_MLPERF[cls]:.2f}x NVIDIA's {NVIDIA_MLPERF[cls]})",
                    "met": None if sps is None else sps >= MLPERF_GOAL[cls]})
        return out


class NnunetSpeed(NetSpeed):
    num, sid, title = 5, "nnunet", "nnU-Net-like U-Net (128^3, batch 2, bf16): fused, torch.compile, unfused, eager, floor, norms"
    net, name, cfg = "nnunet", "nnU-Net-like U-Net", NNUNET_CFG

    def sets(self, check, s):  # the step benchmark reads the dataset's header (channels, classes)
        seg = check.synth(s, "seg32.h5", 32, 4, task="segmentation")
        return [f"data.path={seg}", "training.precision=bf16"]


class SlicesSpeed(NetSpeed):
    num, sid, title = 6, "slices", "2D slice recipe (256^2, precision auto): batch 16 and 128"
    net, name, cfg = "slices", "2D slices (unet2d)", SLICES_CFG
    batches = (16, 128)

    def step_s(self, b):
        return E.H100[f"step_slices{b}"]

    def compile_s(self):
        return E.H100["compile_2d"]

    def sets(self, check, s):
        seg = check.synth(s, "seg32.h5", 32, 4, task="segmentation")
        return [f"data.path={seg}", "data.patch_size=[1,256,256]"]

    def goals(self, check, figs, got):
        out = super().goals(check, figs, got)
        runs = [(r.get("samples_per_s") or 0, b) for (kind, b), r in got.items() if kind in ("fused", "nofused")]
        sps, b = max(runs) if runs else (None, None)
        out.append({"goal": f"2D slices >= {SLICES_GOAL:g} slices/s", "met": None if sps is None else sps >= SLICES_GOAL,
                    "figure": "not measured" if sps is None else f"{sps:.0f} slices/s at batch {b}"})
        return out


def specs(part):
    every = [Machine(), KernelTests(), OpenKbpSpeed(), MlperfSpeed(), NnunetSpeed(), SlicesSpeed()]
    return [sp for sp in every if sp.num in PARTS[part]]


class SpeedReport:
    """The report's title, its first lines (the machine) and its closing table (plan.run_check)."""
    title = "speed report (scripts/bench/speed.sh)"

    def __init__(self, args):
        self.args = args

    def command(self):
        a = self.args
        argv = ["scripts/bench/speed.sh", "--deadline", f"{a.deadline or 0:g}", "--report", a.report or "-",
                "--part", a.part]
        return shlex.join(argv + ([a.trainer] if a.trainer else []))

    def machine(self, check):
        m = next((s for s in check.sections if s.num == 1), None)
        f = dict(m.rehearsal_figures, **m.figures) if m else {}
        return f

    def header(self, check):
        f = self.machine(check)
        cls = gpu_class(check.gpu_name)
        return [f"- GPU: {check.gpu_name or 'none'} ({cls or 'neither H100 nor H200: no NVIDIA figure'}); driver "
                f"{f.get('driver') or 'not read'}; torch {f.get('torch') or 'not read'} (CUDA {f.get('torch_cuda')}, "
                f"cuDNN {f.get('cudnn')}); trainer commit {check.commit}",
                f"- part {self.args.part}; command: `{self.command()}`", ""]

    def tail(self, check):
        cls = gpu_class(check.gpu_name)
        nvidia = NVIDIA_MLPERF.get(cls)
        f = self.machine(check)
        lines = ["", "## Table for docs/performance.md", "",
                 f"{time.strftime('%Y-%m-%d')}, GPU {check.gpu_name or 'none (no CUDA: nothing measured)'}, driver "
                 f"{f.get('driver') or '-'}, torch {f.get('torch') or '-'}, commit {check.commit}:", "",
                 f"    {self.command()}", "",
                 "| network | batch | step | samples/s (2D: slices/s) | ms median | p10 | p90 | TFLOP/s | peak GiB | "
                 "conv floor ms (share of the step) | MLPerf rows: x NVIDIA's "
                 f"{str(nvidia) + ' samples/s' if nvidia else '(no figure for this GPU)'} |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
        goals, profiles, compare, norms, s2d = [], [], [], [], []
        kernels = next((s for s in check.sections if s.sid == "kernels"), None)
        for s in check.sections[1:]:
            if s is kernels:
                continue
            figs = s.figures if s.figures.get("rows") or not s.rehearsal_figures.get("rows") else s.rehearsal_figures
            name = figs.get("network") or s.title.split(" (")[0]
            where = "" if figs is s.figures else " (CPU rehearsal, not a speed figure)"
            floors = figs.get("conv_floor", {})
            for r in figs.get("rows", []):
                fl = floors.get(str(r["batch"]), {}).get("floor_ms")
                share = f"{fl:.1f} ({fl / r['ms_median']:.0%})" if fl and r.get("ms_median") else "-"
                vs = (f"{r['samples_per_s'] / nvidia:.2f}x" if nvidia and r.get("samples_per_s") and
                      s.sid == "mlperf" else "-")
                lines.append(f"| {name}{where} | {r['batch']} | {r['tool']} | {cell(r['samples_per_s'], '{:.1f}')} | "
                             f"{cell(r['ms_median'])} | {cell(r['ms_p10'])} | {cell(r['ms_p90'])} | "
                             f"{cell(r['tflops'], '{:.1f}')} | {cell(r['peak_gib'])} | {share} | {vs} |")
            if not figs.get("rows"):
                why = (s.reason or "not reached").replace("|", "/")
                lines.append(f"| {name} | - | not measured ({s.status}: {why}) | | | | | | | | |")
            goals += [dict(g, goal=g["goal"] + where) for g in figs.get("goals", [])]
            for b, p in figs.get("profiles", {}).items():
                total = p.get("total_ms_per_step") or 0
                cats = ", ".join(f"{k} {v:.1f} ms ({v / total:.0%})" for k, v in sorted(
                    p["categories"].items(), key=lambda kv: -(kv[1] or 0)) if v and total)
                profiles.append(f"| {name}{where} | {b} | {total:.1f} | {cats} |")
            compare += fused_vs_unfused(name + where, figs)
            norms += norms_rows(name + where, figs)
            s2d += space_to_depth_rows(name + where, figs)
        if kernels is not None:
            k = kernels.figures
            lines += ["", f"Our kernels' GPU tests on {k.get('architecture') or 'no GPU'} (section 2: {kernels.status}"
                      f"{', ' + kernels.reason if kernels.reason else ''}); a family goes into verified_architectures "
                      "(src/model/fused_kernels.cpp) only where they passed and its fused step below is no slower than "
                      "the unfused one:", "", "| family | its tests | on this GPU |", "|---|---|---|"]
            lines += kernels_rows(k) or ["| - | not run | not measured |"]
        if profiles:
            lines += ["", "| network | batch | profiled ms per step | by category (trainer --benchmark --profile, fused) |",
                      "|---|---|---|---|"] + profiles
        if compare:
            lines += ["", "| network | batch | category | fused ms | unfused (ATen) ms | fused / unfused |",
                      "|---|---|---|---|---|---|"] + compare
        if norms:
            lines += ["", "| network | batch | norm layers | ATen ms (sites) | ours ms | cuDNN ms | fastest (all sites) | "
                      "worst diff from ATen | not run |", "|---|---|---|---|---|---|---|---|---|"] + norms
        if s2d:
            lines += ["", "| network | batch | stride-2 4³ convolutions | their floor ms | as space-to-depth ms | "
                      "ratio | largest difference |", "|---|---|---|---|---|---|---|"] + s2d
        if goals:
            lines += ["", "| goal | figure | met |", "|---|---|---|"] + [
                f"| {g['goal']} | {g['figure']} | {'not measured' if g['met'] is None else 'yes' if g['met'] else 'no'} |"
                for g in goals]
        return lines
