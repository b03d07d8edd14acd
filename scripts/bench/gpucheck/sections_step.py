"""Section 3: the step time of the OpenKBP baseline and of the nnU-Net-like network, the trainer's
step with the CUDA graph on and off against the same step in PyTorch eager, on the same GPU in the
same call (the PyTorch side in the one torch process), plus the roofline and the step's memory
growth (reserved after the 10th and after the last timed step of one process). Section 5: the MLPerf
3D U-Net (configs/mlperf_unet3d.yaml, 128^3, batch 2, bf16) the same way, against NVIDIA's 72.2
samples/s per H100. Section 10: torch.compile of the OpenKBP and MLPerf steps on the PyTorch side.
Section 15: the MLPerf step's samples/s per batch (2, 4, 7, 8; graph on; issue 53), last in value."""
import os
import sys

from . import estimates as E
from .runner import BENCH, ROOT
from .sections_tests import Spec

sys.path.insert(0, BENCH)
import compare  # noqa: E402  (standard library only: the config reader and pytorch_step.py's options)

KBP_CFG = os.path.join(ROOT, "configs", "openkbp_baseline.yaml")
NNUNET_CFG = os.path.join(ROOT, "configs", "segmentation_nnunet_like.yaml")
MLPERF_CFG = os.path.join(ROOT, "configs", "mlperf_unet3d.yaml")
MLPERF_H100_SAMPLES_PER_S = 72.2  # NVIDIA's MLPerf Training v4.0 3D U-Net, per H100 (docs/performance.md)
STEPS, WARMUP, MEM_STEPS = 20, 5, 40  # timed steps; untimed first; the memory run's timed steps
SWEEP_BATCHES = (2, 4, 7, 8)           # section 15 (batch 2 is section 5's graph-on run)
SWEEP_STEPS, SWEEP_WARMUP = 10, 3      # per swept batch (the benchmark adds the graph's warm-up steps)
MEM_GROWTH_LIMIT = 0.05                # reserved after the last step over after the 10th, at most +5 %
FIGS = ("step_ms_median", "step_ms_p10", "step_ms_p90", "samples_per_s", "tflops", "peak_gpu_mem_bytes",
        "cuda_graph", "cuda_graph_note", "skipped_steps", "warmup_skipped_steps")


def bench(check, s, cfg, sets, steps, warmup, log_name, env=None, launcher=None, profile=False):
    """trainer --benchmark's JSON line (the last one); RuntimeError when it fails or prints none.
    profile: with --profile, the step profile's JSON line as the result's "profile" member."""
    cmd = (launcher or check.trainer) + ["--config", cfg, "--benchmark", "--steps", str(steps), "--warmup", str(warmup)]
    cmd += ["--profile"] if profile else []
    for k in sets:
        cmd += ["--set", k]
    rc, out = check.run(s, cmd, timeout=600, env=env, log_name=log_name)
    r = check.json_lines(out, "step")
    if rc != 0 or not r:
        raise RuntimeError(f"trainer --benchmark ({log_name}) exit {rc}: {check.last_line(out)}")
    if profile:
        p = check.json_lines(out, "step_profile")
        r[-1]["profile"] = p[-1] if p else None
    return r[-1]


def figures(check, r):
    f = {k: r.get(k) for k in FIGS if k in r}
    if check.peak_tflops and r.get("tflops"):
        f["share_of_bf16_peak"] = round(r["tflops"] / check.peak_tflops, 3)
    return f


def mirror_argv(ours, cfg, sets, steps, warmup, variants="eager"):
    """pytorch_step.py's options (also conv_floor.py's) for the step `ours` timed."""
    keys = compare.config_sections(cfg, sets)
    keys.update(ours.get("resolved", {}))
    filters = int(keys.get("model.base_filters", 64))
    try:
        return compare.pytorch_argv(ours, keys, filters, steps, warmup, variants)
    except SystemExit as ex:
        raise RuntimeError(f"no PyTorch mirror for this step: {ex}")


def pytorch(check, s, ours, cfg, sets, steps, warmup, variants="eager"):
    """The step `ours` timed, in the torch process: its JSON (the first variant's)."""
    argv = mirror_argv(ours, cfg, sets, steps, warmup, variants)
    res = check.torch_side(s).request(s, "step", timeout=900, argv=argv)
    return res[0]


def judge_step(s, key, r, graph):
    if graph and not r.get("cuda_graph"):
        s.fail(f"{key}: training.cuda_graph=on but the graph was not replayed ({r.get('cuda_graph_note')})")
    if r.get("skipped_steps"):
        s.fail(f"{key}: {r['skipped_steps']} timed steps skipped (non-finite)")


def pytorch_side(s, f, name, ours_graph, ours_eager, theirs):
    """The PyTorch step's figures beside the trainer's in `f`; FAIL when the networks differ."""
    f["pytorch_eager"] = {k: theirs.get(k) for k in ("step_ms_median", "step_ms_p10", "step_ms_p90", "tflops",
                                                     "peak_gpu_mem_bytes", "torch")}
    f.update(compare_figures(ours_graph, ours_eager, theirs))
    if not f["parameters_equal"]:
        s.fail(f"{name}: PyTorch's network has {theirs.get('parameters')} parameters, the trainer's "
               f"{ours_graph.get('parameters')}: not the same network")
    if not f["flops_equal"]:
        s.notes.append(f"{name}: FLOPs per step differ between the trainer and PyTorch")


def compare_figures(ours_graph, ours_eager, theirs):
    f = {"pytorch_eager_ms": theirs.get("step_ms_median"), "parameters": ours_graph.get("parameters"),
         "parameters_equal": ours_graph.get("parameters") == theirs.get("parameters"),
         "flops_equal": ours_graph.get("flops_per_step") == theirs.get("flops_per_step")}
    pt = theirs.get("step_ms_median")
    for name, r in (("graph", ours_graph), ("eager", ours_eager)):
        if r and r.get("step_ms_median") and pt:
            f[f"speedup_trainer_{name}_vs_pytorch_eager"] = round(pt / r["step_ms_median"], 3)
    return f


class StepTime(Spec):
    num, sid, title = 3, "step-time", "Step time: OpenKBP baseline and nnU-Net-like, graph on/off, against PyTorch eager"

    def estimate(self, check):
        k = E.H100
        torch_start = E.torch_start(check)
        parts = [torch_start + k["roofline"],
                 E.trainer_bench("openkbp", MEM_STEPS, WARMUP, True), E.trainer_bench("openkbp", STEPS, WARMUP, False),
                 E.torch_step("openkbp", STEPS, WARMUP), k["synth_small"],
                 E.trainer_bench("nnunet", STEPS, WARMUP, True), E.trainer_bench("nnunet", STEPS, WARMUP, False),
                 E.torch_step("nnunet", STEPS, WARMUP)]
        return sum(parts), (f"torch import + roofline {parts[0]:.0f} s; 4 trainer benchmarks (start "
                            f"{k['trainer_start']:.0f} s, cuDNN autotune {k['autotune_openkbp']:.0f}/"
                            f"{k['autotune_nnunet']:.0f} s, capture {k['capture']:.0f} s, steps x "
                            f"{k['step_openkbp'] * 1e3:.0f}/{k['step_nnunet'] * 1e3:.0f} ms); 2 PyTorch eager "
                            "steps in the torch process; a segmentation phantom")

    def cpu_estimate(self, check):
        k = E.CPU
        return k["tiny_bench"] + k["torch_import"] + k["tiny_torch_step"], \
            "tiny trainer benchmark, torch import, the same tiny step in PyTorch"

    def run(self, check, s):
        try:  # the trainer's figures are measured even when the PyTorch side cannot start
            ts = check.torch_side(s)
            s.figures["torch"] = {k: ts.info.get(k) for k in ("torch", "cuda", "cudnn", "device", "import_s")}
            if not ts.info.get("cuda_available"):
                s.fail(f"torch in {check.python} sees no CUDA device (torch {ts.info.get('torch')})")
            roof = ts.request(s, "roofline", timeout=120, n=8192, copy_gib=2.0, reps=5)
            check.peak_tflops = roof["bf16_tflops"]
            s.figures["roofline"] = {"bf16_matmul_tflops": round(roof["bf16_tflops"], 1),
                                     "bandwidth_gb_s": round(roof["bandwidth_gb_s"]), "gpu": roof["gpu"],
                                     "gpu_memory_bytes": roof["memory_bytes"]}
        except RuntimeError as ex:
            s.fail(f"PyTorch side: {ex}")
        nets = [("openkbp_baseline", KBP_CFG, ["training.loss=l1", "training.precision=bf16"], MEM_STEPS),
                ("nnunet_like", NNUNET_CFG, None, STEPS)]
        for name, cfg, sets, graph_steps in nets:
            f = s.figures.setdefault(name, {})
            try:
                if sets is None:  # the step benchmark reads the dataset's header (channels, classes)
                    seg = check.synth(s, "seg32.h5", 32, 4, task="segmentation")
                    sets = [f"data.path={seg}", "training.precision=bf16"]
                g = bench(check, s, cfg, sets + ["training.cuda_graph=on"], graph_steps, WARMUP, f"{name}-graph")
                f["trainer_graph"] = figures(check, g)
                judge_step(s, f"{name} graph on", g, True)
                check.shared[name + "_graph"] = (g, cfg, sets)
                if name == "openkbp_baseline":
                    self.memory(s, g)
                e = bench(check, s, cfg, sets + ["training.cuda_graph=off"], STEPS, WARMUP, f"{name}-eager")
                f["trainer_eager"] = figures(check, e)
                judge_step(s, f"{name} graph off", e, False)
                if not check.shared.get("python_has_torch"):
                    raise RuntimeError(f"no torch in {check.python} for the PyTorch side (set U3D_PYTHON)")
                pytorch_side(s, f, name, g, e, pytorch(check, s, g, cfg, sets, STEPS, WARMUP))
            except RuntimeError as ex:
                s.fail(f"{name}: {ex}")

    def memory(self, s, r):
        a, b = r.get("reserved_step10_bytes"), r.get("reserved_last_bytes")
        if a is None or b is None:
            s.partial("memory growth not measured: the trainer's JSON has no reserved_step10_bytes/"
                      "reserved_last_bytes")
            return
        s.figures["memory_growth"] = {"reserved_after_step_10": a, f"reserved_after_step_{MEM_STEPS}": b,
                                      "growth_bytes": b - a}
        if b > a * (1 + MEM_GROWTH_LIMIT):
            s.fail(f"GPU memory reserved grew from {a} to {b} bytes between timed step 10 and {MEM_STEPS}")

    def rehearse(self, check, s):
        if not check.shared.get("python_has_torch"):
            s.rehearsal, s.rehearsal_reason = "SKIPPED", f"no torch in {check.python} (set U3D_PYTHON)"
            return
        sets = ["training.loss=l1", "training.device=cpu", "model.base_filters=2", "data.patch_size=64",
                "data.batch_size=1"]
        try:
            ours = bench(check, s, KBP_CFG, sets, 2, 1, "cpu-smoke")
            theirs = pytorch(check, s, ours, KBP_CFG, sets, 1, 0)  # one step: the plumbing, not a figure
            s.rehearsal_figures = {"note": "CPU smoke, not a speed figure: OpenKBP baseline at 2 filters, 64^3, "
                                           "batch 1", "trainer_ms": ours.get("step_ms_median"),
                                   "pytorch_eager_ms": theirs.get("step_ms_median"),
                                   "torch_import_s": check.torch.info.get("import_s") if check.torch else None}
            s.rehearsal_figures.update({k: v for k, v in compare_figures(ours, None, theirs).items()
                                        if k in ("parameters", "parameters_equal", "flops_equal")})
            if not s.rehearsal_figures["parameters_equal"]:
                s.rehearsal_fail("the PyTorch network's parameter count differs from the trainer's")
            else:
                s.rehearsal = "PASS"
        except RuntimeError as ex:
            s.rehearsal_fail(str(ex))


class Mlperf(Spec):
    num, sid, title = 5, "mlperf", "MLPerf 3D U-Net (128^3, batch 2, bf16), graph on/off, against PyTorch eager"

    def estimate(self, check):
        k = E.H100
        parts = [E.torch_start(check), k["synth_kits"], E.trainer_bench("mlperf", STEPS, WARMUP, True),
                 E.trainer_bench("mlperf", STEPS, WARMUP, False), E.torch_step("mlperf", STEPS, WARMUP)]
        return sum(parts), (f"KiTS-like phantoms {k['synth_kits']:.0f} s; 2 trainer benchmarks (cuDNN autotune "
                            f"{k['autotune_mlperf']:.0f} s, steps x {k['step_mlperf'] * 1e3:.0f} ms); the PyTorch "
                            "eager step in the torch process")

    def run(self, check, s):
        f = s.figures.setdefault("mlperf_unet3d", {})
        try:
            kits = check.synth(s, "kits128.h5", 128, 4, task="kits")
            sets = [f"data.path={kits}", "training.precision=bf16"]
            g = bench(check, s, MLPERF_CFG, sets + ["training.cuda_graph=on"], STEPS, WARMUP, "mlperf-graph")
            f["trainer_graph"] = figures(check, g)
            judge_step(s, "mlperf graph on", g, True)
            check.shared["mlperf_unet3d_graph"] = (g, MLPERF_CFG, sets)
            if g.get("samples_per_s"):
                f["share_of_nvidia_72_2_samples_per_s"] = round(g["samples_per_s"] / MLPERF_H100_SAMPLES_PER_S, 3)
            e = bench(check, s, MLPERF_CFG, sets + ["training.cuda_graph=off"], STEPS, WARMUP, "mlperf-eager")
            f["trainer_eager"] = figures(check, e)
            judge_step(s, "mlperf graph off", e, False)
            if not check.shared.get("python_has_torch"):
                raise RuntimeError(f"no torch in {check.python} for the PyTorch side (set U3D_PYTHON)")
            pytorch_side(s, f, "mlperf_unet3d", g, e, pytorch(check, s, g, MLPERF_CFG, sets, STEPS, WARMUP))
        except RuntimeError as ex:
            s.fail(f"mlperf_unet3d: {ex}")


class Compile(Spec):
    num, sid, title = 10, "torch-compile", "torch.compile of the OpenKBP-baseline and MLPerf steps on the PyTorch side"
    NETS = (("openkbp_baseline", "openkbp"), ("mlperf_unet3d", "mlperf"))

    def estimate(self, check):
        k = E.H100
        t = E.torch_start(check) + sum(k["compile"] + E.torch_step(net, STEPS, WARMUP) for _, net in self.NETS)
        return t, f"inductor compile {k['compile']:.0f} s + autotune and {STEPS + WARMUP} steps, per network"

    def run(self, check, s):
        for name, _ in self.NETS:
            got = check.shared.get(name + "_graph")
            if not got:
                s.notes.append(f"{name}: the trainer's step was not timed before (nothing to compare with)")
                continue
            g, cfg, sets = got
            try:
                r = pytorch(check, s, g, cfg, sets, STEPS, WARMUP, variants="compile")
            except RuntimeError as ex:
                s.fail(f"{name}: {ex}")
                continue
            f = s.figures.setdefault(name, {})
            f["pytorch_compile"] = {k: r.get(k) for k in ("step_ms_median", "step_ms_p10", "step_ms_p90", "tflops",
                                                          "peak_gpu_mem_bytes")}
            f["trainer_graph_ms"] = g.get("step_ms_median")
            if r.get("step_ms_median") and g.get("step_ms_median"):
                f["speedup_trainer_graph_vs_pytorch_compile"] = round(r["step_ms_median"] / g["step_ms_median"], 3)
        if not s.figures:
            s.skip("sections 3 and 5 timed no trainer step (nothing to compare with)")


class MlperfBatch(Spec):
    num, sid, title = 15, "mlperf-batch", "MLPerf 3D U-Net: samples/s per batch (2, 4, 7, 8), graph on"

    def estimate(self, check):
        runs = [E.trainer_bench("mlperf", SWEEP_STEPS, SWEEP_WARMUP, True, batch_factor=b / 2)
                for b in SWEEP_BATCHES if b != 2]
        return sum(runs), (f"{len(runs)} trainer benchmarks of {SWEEP_STEPS} steps (step time x batch / 2, not "
                           "measured); batch 2 is section 5's")

    def run(self, check, s):
        got = check.shared.get("mlperf_unet3d_graph")
        if not got:
            s.skip("section 5 timed no MLPerf step (its phantom and batch 2 are this sweep's start)")
            return
        g, _, sets = got
        sweep = {}
        for b in SWEEP_BATCHES:
            r = g
            if b != 2:
                try:
                    r = bench(check, s, MLPERF_CFG, sets + ["training.cuda_graph=on", f"data.batch_size={b}"],
                              SWEEP_STEPS, SWEEP_WARMUP, f"mlperf-batch{b}")
                except RuntimeError as ex:  # out of memory at a large batch: a note, the sweep goes on
                    s.notes.append(f"batch {b}: {ex}")
                    r = {}
            sweep[str(b)] = {k: r.get(k) for k in ("samples_per_s", "step_ms_median", "peak_gpu_mem_bytes",
                                                   "cuda_graph", "skipped_steps")}
        s.figures["mlperf_unet3d_batch_sweep"] = sweep
        s.notes.append("samples/s per batch: " + ", ".join(
            f"{b}: {v['samples_per_s'] if v['samples_per_s'] is not None else 'failed'}" for b, v in sweep.items()))
        if all(v["samples_per_s"] is None for b, v in sweep.items() if b != "2"):
            s.fail("no batch above 2 ran")
