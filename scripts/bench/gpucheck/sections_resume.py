"""Section 4: SIGKILL during a GPU training run (GPU cache, CUDA graph on, deterministic) and
--resume, compared bit for bit with the uninterrupted run: every step's loss and learning rate
(steps.csv), the metrics rows (timings aside) and the final weights (`trainer export`'s
safetensors, tensor by tensor), on phantoms made there. The kill comes when the step log shows the
middle of epoch 2 (not after a guessed time). Without CUDA the same sequence runs on the CPU with
a tiny network and the memory cache, as a rehearsal of the plumbing."""
import json
import os
import re
import shutil
import signal
import struct
import time

from . import estimates as E
from .runner import ROOT, _kill_group, read_rows
from .sections_tests import Spec

CFG = os.path.join(ROOT, "configs", "quickstart.yaml")
EXACT = ("epoch", "step", "lr", "train_loss", "val_loss", "val_mae", "best", "skipped_steps")
EPOCHS = 3
GPU = {"spe": 60, "size": 32, "cases": 16, "sets": ["training.device=cuda", "data.cache=gpu", "training.cuda_graph=on"]}
CPU = {"spe": 20, "size": 16, "cases": 8, "sets": ["training.device=cpu", "data.cache=memory", "training.cuda_graph=off",
                                                   "model.levels=2", "model.base_filters=4", "data.patch_size=16",
                                                   "data.batch_size=2", "training.threads=1"]}


def count_rows(path):
    try:
        with open(path, "rb") as f:
            return max(0, f.read().count(b"\n") - 1)
    except OSError:
        return 0


def safetensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file (u64 header length, JSON header, data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


class KillResume(Spec):
    num, sid, title = 4, "kill-resume", "SIGKILL mid-epoch in GPU training (GPU cache, graph on), --resume, bit for bit"

    def estimate(self, check):
        k, spe = E.H100, GPU["spe"]
        t = (k["synth_small"] + E.training_run(EPOCHS, spe) + E.training_run(1.5, spe)
             + E.training_run(EPOCHS - 1, spe) + 2 * k["export"])
        return t, (f"phantoms; 3 training runs ({EPOCHS} + 1.5 + {EPOCHS - 1} epochs of {spe} steps x "
                   f"{k['tiny_step'] * 1e3:.0f} ms, start {k['trainer_start']:.0f} s, capture {k['capture']:.0f} s); "
                   "2 exports")

    def cpu_estimate(self, check):
        k, spe = E.CPU, CPU["spe"]
        t = (k["synth_small"] + E.training_run(EPOCHS, spe, k, False) + E.training_run(1.5, spe, k, False)
             + E.training_run(EPOCHS - 1, spe, k, False) + 2 * k["export"])
        return t, f"phantoms; 3 tiny CPU training runs of {spe}-step epochs; 2 exports"

    def run(self, check, s):
        self.sequence(check, s, GPU, s.figures, s.fail, s.partial)

    def rehearse(self, check, s):
        problems = []
        self.sequence(check, s, CPU, s.rehearsal_figures, problems.append, problems.append)
        s.rehearsal_verdict(problems)

    def sequence(self, check, s, p, figs, fail, partial):
        tag = "gpu" if p is GPU else "cpu"
        runs = os.path.join(check.work, "runs")
        try:
            data = check.synth(s, f"resume-{tag}.h5", p["size"], p["cases"])
        except RuntimeError as ex:
            fail(str(ex))
            return
        spe = p["spe"]
        sets = [f"data.path={data}", f"experiment.output_dir={runs}", "training.deterministic=true",
                f"training.epochs={EPOCHS}", f"training.steps_per_epoch={spe}", "checkpoint.every_epochs=1",
                "checkpoint.keep_last=10", "logging.step_log=true", "logging.plot=false",
                "logging.progress_seconds=0"] + p["sets"]

        def cmd(name, *extra):
            c = check.trainer + ["--config", CFG]
            for k in sets + [f"experiment.name={name}"]:
                c += ["--set", k]
            return c + list(extra)

        plain, killed = f"plain-{tag}", f"killed-{tag}"
        for n in (plain, killed):
            shutil.rmtree(os.path.join(runs, n), ignore_errors=True)
        rc, out = check.run(s, cmd(plain), timeout=300, log_name="uninterrupted")
        if rc != 0:
            fail(f"uninterrupted run exit {rc}: {check.last_line(out)}")
            return
        if p is GPU and "captured in a CUDA graph" not in out:
            fail("the uninterrupted run did not capture its step in a CUDA graph")
        epoch_s = [float(r["epoch_seconds"]) for r in read_rows(os.path.join(runs, plain, "metrics.csv"))
                   if r.get("epoch_seconds")]
        figs["epoch_seconds_uninterrupted"] = epoch_s
        # The killed run: SIGKILL once steps.csv shows half of epoch 2.
        target = spe + spe // 2
        proc, _ = check.spawn(s, cmd(killed), log_name="killed", note=f"SIGKILL at step {target} of {EPOCHS * spe}")
        steps_csv = os.path.join(runs, killed, "steps.csv")
        end, killed_at = time.time() + max(1.0, min(300.0, check.left())), None
        while proc.poll() is None and time.time() < end:
            n = count_rows(steps_csv)
            if n >= target:
                os.killpg(proc.pid, signal.SIGKILL)
                killed_at = n
                break
            time.sleep(0.005)
        if killed_at is None and proc.poll() is None:
            _kill_group(proc)
        proc.wait()
        rc, out = check.finish(s, proc)
        if killed_at is None:
            fail(f"the run ended (exit {rc}) or timed out before step {target}; nothing was killed")
            return
        ck = os.path.join(runs, killed, "checkpoints")
        names = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
        figs["killed_at_step"] = killed_at
        figs["checkpoints_after_kill"] = [n for n in names if n.endswith(".pt")]
        if any(n.startswith("epoch_0002") for n in names):
            partial("the kill landed after epoch 2's checkpoint: not a mid-epoch kill")
        rc, out = check.run(s, cmd(killed, "--resume"), timeout=300, log_name="resume")
        if rc != 0:
            fail(f"--resume exit {rc}: {check.last_line(out)}")
            return
        if p is GPU and "captured in a CUDA graph" not in out:
            fail("the resumed run did not capture its step in a CUDA graph")
        m = re.search(r"\] resume: \S+?([^/\s]+) \(([^,)]*)", out)
        figs["resumed_from"] = f"{m.group(1)} ({m.group(2)})" if m else None
        if not m:
            fail("the resumed run logged no 'resume:' line")
        self.compare(check, s, runs, plain, killed, figs, fail)

    def compare(self, check, s, runs, plain, killed, figs, fail):
        def text(path):
            with open(path) as f:
                return f.read()

        a, b = (os.path.join(runs, n) for n in (plain, killed))
        steps_equal = text(os.path.join(a, "steps.csv")) == text(os.path.join(b, "steps.csv"))
        ra, rb = read_rows(os.path.join(a, "metrics.csv")), read_rows(os.path.join(b, "metrics.csv"))
        cols = [c for c in EXACT if ra and c in ra[0]]
        metrics_equal = len(ra) == len(rb) == EPOCHS and all(
            [x.get(c) for c in cols] == [y.get(c) for c in cols] for x, y in zip(ra, rb))
        figs["steps_csv_equal"], figs["metrics_equal"] = steps_equal, metrics_equal
        figs["train_loss"] = [r.get("train_loss") for r in rb]
        if not steps_equal:
            fail("steps.csv (every step's loss and lr) differs between the resumed and the uninterrupted run")
        if not metrics_equal:
            fail(f"metrics.csv ({', '.join(cols)}) differs: {[r.get('train_loss') for r in ra]} uninterrupted, "
                 f"{figs['train_loss']} resumed")
        weights = {}
        for n, d in ((plain, a), (killed, b)):
            out_dir = os.path.join(check.work, "export-" + n)
            shutil.rmtree(out_dir, ignore_errors=True)
            rc, out = check.run(s, check.trainer + ["export", d, "--checkpoint", "last", "--format", "safetensors",
                                                    "--out", out_dir], timeout=120, log_name="export")
            f = os.path.join(out_dir, "model.safetensors")
            if rc != 0 or not os.path.exists(f):
                fail(f"trainer export exit {rc}: {check.last_line(out)}")
                return
            weights[n] = safetensors(f)
        wa, wb = weights[plain], weights[killed]
        differ = sorted(k for k in wa.keys() | wb.keys() if wa.get(k) != wb.get(k))
        figs["tensors_compared"] = len(wa)
        figs["weights_equal"] = not differ and bool(wa)
        if differ or not wa:
            fail(f"final weights differ in {len(differ)} of {len(wa)} tensors: {', '.join(differ[:5])}")
