"""Sections 11-14: the users' workflows end to end, each as its user runs it, in the order of their
value: (11) OpenKBP on the real sample (import the CSV folders, train the baseline with the GPU cache
and the CUDA graph in bf16, then fp16 if time is left, predict the validation patients with TTA,
`evaluate openkbp`); (12) 2D slices (PNG slices made with `trainer synth --format png`, `import
images`, configs/slices_2d.yaml in fp16, `predict -i` on new PNG slices, Dice); (13) thin surfaces
(TIFF volumes, `import tiff`, configs/surface.yaml, `evaluate surface`); (14) nnU-Net-style
segmentation (an nnU-Net raw folder, `import nnunet`, `trainer plan --device cuda`, training the
plan, `predict -i` on raw NIfTI, `evaluate segmentation`). scripts/bench/workflows.sh runs them.

Each training runs for --minutes (training.max_minutes; the run stops after the epoch the next one
would overrun), with validation and checkpoints only after the last epoch, so a workflow writes two
checkpoints at most (the OpenKBP baseline's is 1.4 GB: one every 5 epochs filled a box's disk and
memory). Each workflow's row: the commands, minutes, epochs, samples/s and the steady epoch time
(the median of the epochs after the first, which holds autotuning and the capture), the time to the
first step, the GPU busy share and data wait (metrics.csv, the trainer's own), peak GPU and host
memory (the run's last lines), the work folder's size, the score, and the seed's published figure
beside it. Without CUDA the same commands run on the CPU at a tiny size, as a rehearsal."""
import os
import re
import shutil
import statistics
import time

from . import estimates as E
from .runner import ROOT, read_rows
from .sections_tests import Spec

CONFIGS = os.path.join(ROOT, "configs")
# After the training runs: no checkpoint or validation before the last epoch, no plot (one each
# epoch), progress lines every 10 s.
QUIET = ["checkpoint.every_epochs=100000", "training.val_every=100000", "logging.plot=false",
         "logging.progress=lines", "logging.progress_seconds=10", "training.epochs=100000"]
# The CPU rehearsal: the same commands on tiny networks and patches, two short epochs.
CPU_SETS = ["training.device=cpu", "data.cache=memory", "training.cuda_graph=off", "training.precision=fp32",
            "training.threads=2", "training.epochs=2", "training.steps_per_epoch=2", "training.max_minutes=0"]


def _median(rows, column):
    vals = []
    for r in rows:
        try:
            vals.append(float(r.get(column) or ""))
        except ValueError:
            pass
    return round(statistics.median(vals), 4) if vals else None


def run_figures(run_dir, out):
    """The row's training figures from the run folder's metrics.csv and the trainer's last lines."""
    rows = read_rows(os.path.join(run_dir, "metrics.csv"))
    steady = rows[1:] or rows  # the first epoch holds autotuning and the CUDA-graph capture
    f = {"epochs": len(rows), "steady_epoch_s": _median(steady, "epoch_seconds"),
         "samples_per_s": _median(steady, "samples_per_second"), "gpu_busy": _median(steady, "gpu_busy"),
         "data_wait": _median(steady, "data_share")}
    m = re.search(r"first step done ([0-9.]+) s after the start", out)
    f["first_step_s"] = float(m.group(1)) if m else None
    m = re.search(r"peak memory: host (\S+ \S+)(?:, GPU (\S+ \S+) allocated, (\S+ \S+) reserved)?", out)
    f["peak_host"] = m.group(1) if m else None
    f["peak_gpu_allocated"] = m.group(2) if m and m.group(2) else None
    f["peak_gpu_reserved"] = m.group(3) if m and m.group(3) else None
    return f


def sets(pairs):
    out = []
    for k in pairs:
        out += ["--set", k]
    return out


class Workflow(Spec):
    """A workflow section: `steps(check, s, row, gpu)` runs its commands and fills `row`."""
    seed = ""  # the seed's published figure, for the row

    def estimate(self, check):
        return self.gpu_seconds(check), self.basis

    def run(self, check, s):
        self._go(check, s, gpu=True)

    def rehearse(self, check, s):
        self._go(check, s, gpu=False)

    def _go(self, check, s, gpu):
        figs = s.figures if gpu else s.rehearsal_figures
        row = {"workflow": self.title.split(":")[0], "seed": self.seed}
        figs["row"] = row
        t0 = time.time()
        try:
            self.steps(check, s, row, gpu)
        except RuntimeError as ex:
            (s.fail if gpu else s.rehearsal_fail)(str(ex))
        finally:  # plan.run_one marks what did not fail PASS
            row["minutes"] = round((time.time() - t0) / 60, 2)
            row["work_folder_mib"] = round(check.last_work_bytes / 2 ** 20)

    # ---- shared steps ------------------------------------------------------------------------------
    def cmd(self, check, s, args, log_name, timeout, what):
        """Runs a trainer command; RuntimeError naming it when it fails; its output."""
        rc, out = check.run(s, check.trainer + args, timeout=timeout, log_name=log_name)
        if rc != 0:
            raise RuntimeError(f"{what} exit {rc}: {check.last_line(out)}")
        return out

    def train(self, check, s, row, gpu, config, name, extra, minutes, label="train"):
        """Trains `config` for `minutes` (GPU) or two tiny epochs (CPU); the run folder and the output."""
        runs = os.path.join(check.work, "runs")
        shutil.rmtree(os.path.join(runs, name), ignore_errors=True)
        base = ["--config", config] + sets([f"experiment.output_dir={runs}", f"experiment.name={name}"] + QUIET)
        if gpu:
            base += sets(["training.device=cuda", f"training.max_minutes={minutes}"] + extra)
        else:
            base += sets(extra + CPU_SETS + self.cpu_sets)
        out = self.cmd(check, s, base, label, timeout=(60 * minutes + 240) if gpu else 300, what=label)
        run_dir = os.path.join(runs, name)
        row.update(run_figures(run_dir, out))
        row["train_minutes"] = minutes if gpu else None
        if gpu and "captured in a CUDA graph" not in out and "training.cuda_graph=off" not in extra:
            s.partial(f"{label}: the step was not captured in a CUDA graph")
        return run_dir, base, out

    cpu_sets = []  # the rehearsal's tiny network and patch

    def gpu_seconds(self, check):
        """A phantom workflow: synth and import, the training's minutes and start, predict and evaluate."""
        k = E.H100
        return k["wf_synth_import"] + k["trainer_start"] + 60 * self.minutes(check) + k["wf_train_extra"] + \
            k["wf_predict_eval"]

    def minutes(self, check):
        return check.args.minutes


class OpenKbpWorkflow(Workflow):
    num, sid = 11, "openkbp"
    title = ("OpenKBP: real patients, import, train (GPU cache, graph, bf16 then fp16), predict (TTA), "
             "evaluate openkbp")
    seed = "Keras U-Net, RTX 3090: 0.65 s per step of 2, 65 s per epoch of 200 patients = 3.1 samples/s"
    basis = "unpack + import, training.max_minutes per precision + start, predict with TTA, evaluate"
    cpu_sets = ["model.base_filters=2", "data.batch_size=1", "predict.tta=none"]

    def unavailable(self, check):
        return None if check.args.openkbp else "no --openkbp DIR|openkbp-sample.tar.xz given"

    def gpu_seconds(self, check):
        k = E.H100
        imp = 0.0 if check.shared.get("openkbp") else k["import_openkbp"]
        # bf16, then fp16 for half the minutes when it fits
        return imp + 1.5 * (k["trainer_start"] + 60 * self.minutes(check) + k["wf_train_extra"]) + k["predict_eval"]

    def first_estimate(self, check):
        k = E.H100
        return (k["import_openkbp"] + k["trainer_start"] + 60 * self.minutes(check) + k["wf_train_extra"]
                + k["predict_eval"])

    def cpu_estimate(self, check):
        return E.CPU["import_openkbp"] + E.CPU["wf_openkbp"], "import the sample, 2 tiny epochs, predict, evaluate"

    def import_sample(self, check, s):
        if check.shared.get("openkbp"):
            return check.shared["openkbp"]
        src = data = check.args.openkbp
        if os.path.isfile(src):
            rc, out = check.run(s, ["tar", "-xJf", src, "-C", check.work], timeout=300, log_name="unpack")
            if rc != 0:
                raise RuntimeError(f"unpacking {src}: {check.last_line(out)}")
            data = os.path.join(check.work, "provided-data")
        h5 = os.path.join(check.work, "openkbp.h5")
        if not os.path.exists(h5):
            self.cmd(check, s, ["import", "openkbp", "--source", data, "--out", h5], "import", 600, "import openkbp")
        check.shared["openkbp"] = (data, h5)
        return data, h5

    def steps(self, check, s, row, gpu):
        data, h5 = self.import_sample(check, s)
        row["import_peak_rss_mib"] = round((check.last_peak_rss or 0) / 2 ** 20)
        cfg = os.path.join(CONFIGS, "openkbp_baseline.yaml")
        common = [f"data.path={h5}", "predict.split=val", "predict.tta=flips"]
        gpu_sets = common + ["data.cache=gpu", "training.cuda_graph=on"]
        minutes = self.minutes(check)
        run_dir, base, _ = self.train(check, s, row, gpu, cfg, "wf_openkbp",
                                      gpu_sets + ["training.precision=bf16"] if gpu else common, minutes)
        row["precision"] = "bf16" if gpu else "fp32"
        self.cmd(check, s, base + ["--predict-only"], "predict", 600, "--predict-only")
        out = self.cmd(check, s, ["evaluate", "openkbp", "--reference", os.path.join(data, "validation-pats"),
                                  "--predictions", os.path.join(run_dir, "predictions", "openkbp")],
                       "evaluate", 300, "evaluate openkbp")
        m1, m2 = re.search(r"dose score ([0-9.]+)", out), re.search(r"DVH score ([0-9.]+)", out)
        if not m1 or not m2:
            raise RuntimeError(f"evaluate openkbp printed no scores: {check.last_line(out)}")
        row["score"] = {"dose_score_gy": float(m1.group(1)), "dvh_score_gy": float(m2.group(1))}
        sps = row.get("samples_per_s")
        row["vs_seed"] = round(sps / 3.08, 1) if sps and gpu else None  # a CPU rehearsal is no speed figure
        k = E.H100
        if gpu and check.fits(k["trainer_start"] + 30 * minutes + k["wf_train_extra"]):
            fp16 = {}
            self.train(check, s, fp16, gpu, cfg, "wf_openkbp_fp16", gpu_sets + ["training.precision=fp16"],
                       minutes / 2, label="train-fp16")
            row["fp16"] = {key: fp16.get(key) for key in ("epochs", "steady_epoch_s", "samples_per_s", "gpu_busy",
                                                          "data_wait", "peak_gpu_reserved")}


class SlicesWorkflow(Workflow):
    num, sid = 12, "slices"
    title = "2D slices: PNG slices, import images, train (fp16), predict -i on new PNG slices, Dice"
    seed = "PyTorch 2D U-Net, RTX 4090: 310 slices/s"
    basis = "synth + import, training.max_minutes + start, predict -i, evaluate"
    cpu_sets = ["model.base_filters=4", "model.levels=3", "data.batch_size=2", "data.patch_size=[1,64,64]"]

    def size(self, gpu):
        return "24,256,256" if gpu else "6,64,64"

    def cpu_estimate(self, check):
        return E.CPU["wf_small"], "synth PNG slices, import, 2 tiny epochs, predict -i, evaluate"

    def steps(self, check, s, row, gpu):
        w = check.work
        png, new = os.path.join(w, "slices_png"), os.path.join(w, "slices_new")
        for folder, cases, seed in ((png, 12 if gpu else 4, "0"), (new, 2, "1")):
            shutil.rmtree(folder, ignore_errors=True)
            self.cmd(check, s, ["synth", "--task", "segmentation", "--format", "png", "--cases", str(cases), "--size",
                                self.size(gpu), "--seed", seed, "--out", folder], "synth", 300, "synth --format png")
        h5, ref = os.path.join(w, "slices.h5"), os.path.join(w, "slices_new_ref")
        self.cmd(check, s, ["import", "images", "--images", png, "--out", h5, "--val-fraction", "0.2", "--force"],
                 "import", 300, "import images")
        # The new patients' references (their masks as TIFF volumes), without training on them.
        shutil.rmtree(ref, ignore_errors=True)
        self.cmd(check, s, ["import", "images", "--images", new, "--out", os.path.join(w, "slices_new.h5"),
                            "--val-fraction", "0.5", "--reference-out", ref, "--force"], "reference", 300,
                 "import images --reference-out")
        run_dir, _, _ = self.train(check, s, row, gpu, os.path.join(CONFIGS, "slices_2d.yaml"), "wf_slices",
                                   [f"data.path={h5}"] + (["training.precision=fp16"] if gpu else []),
                                   self.minutes(check))
        row["precision"] = "fp16" if gpu else "fp32"
        masks = os.path.join(w, "slices_masks")
        shutil.rmtree(masks, ignore_errors=True)
        self.cmd(check, s, ["predict", "-i", new, "-o", masks, "--run", run_dir, "--device", "cuda" if gpu else "cpu"],
                 "predict", 300, "predict -i")
        out = self.cmd(check, s, ["evaluate", "segmentation", "--reference", ref, "--predictions", masks],
                       "evaluate", 300, "evaluate segmentation")
        row["score"] = {"mean_dice": mean_dice(out)}
        sps = row.get("samples_per_s")
        row["vs_seed"] = round(sps / 310, 2) if sps and gpu else None


class SurfaceWorkflow(Workflow):
    num, sid = 13, "surface"
    title = "Thin surfaces: TIFF volumes, import tiff, train, predict, evaluate surface"
    seed = "PyTorch 3D U-Net, A100: 18 s per step at batch 1"
    basis = "synth + import, training.max_minutes + start, predict, evaluate"
    cpu_sets = ["model.base_filters=4", "model.levels=2", "data.batch_size=1", "data.patch_size=16",
                "predict.tta=none"]

    def cpu_estimate(self, check):
        return E.CPU["wf_small"], "synth TIFF volumes, import, 2 tiny epochs, predict, evaluate"

    def steps(self, check, s, row, gpu):
        w = check.work
        tiff, h5 = os.path.join(w, "surface_tiff"), os.path.join(w, "surface.h5")
        shutil.rmtree(tiff, ignore_errors=True)
        self.cmd(check, s, ["synth", "--task", "surface", "--format", "tiff", "--cases", "12" if gpu else "4",
                            "--size", "128" if gpu else "24", "--seed", "0", "--out", tiff], "synth", 300,
                 "synth --task surface --format tiff")
        self.cmd(check, s, ["import", "tiff", "--images", os.path.join(tiff, "images"), "--labels",
                            os.path.join(tiff, "labels"), "--ignore-label", "2", "--out", h5, "--force"],
                 "import", 300, "import tiff")
        run_dir, base, _ = self.train(check, s, row, gpu, os.path.join(CONFIGS, "surface.yaml"), "wf_surface",
                                      [f"data.path={h5}", "predict.split=val"], self.minutes(check))
        self.cmd(check, s, base + ["--predict-only"], "predict", 600, "--predict-only")
        out = self.cmd(check, s, ["evaluate", "surface", "--reference", os.path.join(tiff, "labels"),
                                  "--predictions", os.path.join(run_dir, "predictions", "val"), "--only-predicted",
                                  "--ignore-label", "2"], "evaluate", 300, "evaluate surface")
        row["score"] = surface_scores(out)
        steady, spe = row.get("steady_epoch_s"), None
        rows = read_rows(os.path.join(run_dir, "metrics.csv"))
        if rows and rows[-1].get("step") and row.get("epochs"):
            spe = int(rows[-1]["step"]) / len(rows)
        row["step_s"] = round(steady / spe, 4) if steady and spe else None
        row["vs_seed"] = round(18.0 / row["step_s"], 1) if row.get("step_s") and gpu else None


class NnunetWorkflow(Workflow):
    num, sid = 14, "nnunet"
    title = "nnU-Net-style segmentation: raw NIfTI folder, import, plan (--device cuda), train, predict -i, evaluate"
    seed = "nnU-Net: its own plan and trainer on the same GPU (not measured here)"
    basis = "synth + import, plan with measured candidates, training.max_minutes + start, predict -i, evaluate"
    cpu_sets = ["data.batch_size=1", "predict.tta=none", "training.val_patch_batches=2"]  # the plan's own topology

    def gpu_seconds(self, check):
        return E.H100["wf_plan_cuda"] + super().gpu_seconds(check)

    def cpu_estimate(self, check):
        return E.CPU["wf_small"] + E.CPU["trainer_start"], "synth NIfTI, import, plan, 2 tiny epochs, predict -i"

    def steps(self, check, s, row, gpu):
        w = check.work
        raw, h5 = os.path.join(w, "Dataset901_Phantom"), os.path.join(w, "d901.h5")
        shutil.rmtree(raw, ignore_errors=True)
        self.cmd(check, s, ["synth", "--task", "segmentation", "--format", "nnunet", "--cases", "16" if gpu else "5",
                            "--size", "96" if gpu else "24", "--test-fraction", "0.25", "--seed", "0", "--out", raw],
                 "synth", 300, "synth --format nnunet")
        self.cmd(check, s, ["import", "nnunet", "--source", raw, "--out", h5, "--force"], "import", 300,
                 "import nnunet")
        plan = os.path.join(w, "d901.yaml")
        self.cmd(check, s, ["plan", h5, "--out", plan, "--force", "--device", "cuda" if gpu else "cpu"], "plan",
                 300, "plan")
        run_dir, _, _ = self.train(check, s, row, gpu, plan, "wf_nnunet", [], self.minutes(check))
        out_dir = os.path.join(w, "nnunet_pred")
        shutil.rmtree(out_dir, ignore_errors=True)
        self.cmd(check, s, ["predict", "-i", os.path.join(raw, "imagesTs"), "-o", out_dir, "--run", run_dir,
                            "--device", "cuda" if gpu else "cpu"], "predict", 600, "predict -i")
        out = self.cmd(check, s, ["evaluate", "segmentation", "--reference", os.path.join(raw, "labelsTs"),
                                  "--predictions", out_dir], "evaluate", 300, "evaluate segmentation")
        row["score"] = {"mean_dice": mean_dice(out)}


def mean_row(out):
    """The fields after "mean" on the last line of an evaluation table that starts with it."""
    rows = [line.split()[1:] for line in out.splitlines() if line.split()[:1] == ["mean"]]
    return rows[-1] if rows else []


def mean_dice(out):
    """evaluate segmentation's mean row: "mean | 0.9123 / 2.5 | 0.81 / 4.1": the mean over the classes."""
    dice = []
    for cell in " ".join(mean_row(out)).split("|")[1:]:
        first = cell.split("/")[0].strip()
        try:
            dice.append(float(first))
        except ValueError:
            pass
    return round(sum(dice) / len(dice), 4) if dice else None


def surface_scores(out):
    """evaluate surface's mean row: SurfDice VOI VOIscore topo total."""
    vals = []
    for v in mean_row(out):
        try:
            vals.append(float(v))
        except ValueError:
            pass
    keys = ("surface_dice", "voi", "voi_score", "topo_score", "total")
    return dict(zip(keys, vals)) if len(vals) == len(keys) else {"surface_dice": None}


WORKFLOWS = [OpenKbpWorkflow, SlicesWorkflow, SurfaceWorkflow, NnunetWorkflow]
