"""Section 11, only with --openkbp DIR|openkbp-sample.tar.xz: the OpenKBP sample end to end on the
GPU: import, training with the GPU cache and CUDA graphs for --minutes (training.max_minutes),
prediction with TTA on the validation split and `trainer evaluate openkbp`."""
import os
import re
import shutil

from . import estimates as E
from .runner import ROOT
from .sections_tests import Spec

CFG = os.path.join(ROOT, "configs", "openkbp.yaml")


def openkbp_import(check, s):
    """Unpacks (a .tar.xz) and imports --openkbp once: (provided-data folder, HDF5 path)."""
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
        rc, out = check.run(s, check.trainer + ["import", "openkbp", "--source", data, "--out", h5], timeout=600,
                            log_name="import")
        if rc != 0:
            raise RuntimeError(f"import openkbp exit {rc}: {check.last_line(out)}")
    check.shared["openkbp"] = (data, h5)
    return data, h5


class OpenKbp(Spec):
    num, sid, title = 11, "openkbp", "OpenKBP sample end to end: import, train (GPU cache, graph), predict (TTA), evaluate"

    def unavailable(self, check):
        return None if check.args.openkbp else "no --openkbp DIR given"

    def estimate(self, check):
        k = E.H100
        imp = 0.0 if check.shared.get("openkbp") else k["import_openkbp"]
        return (imp + k["trainer_start"] + 60 * check.args.minutes + 30 + k["predict_eval"],
                f"import {imp:.0f} s; training.max_minutes {check.args.minutes} (+30 s start, last epoch, "
                f"checkpoint); predict + evaluate {k['predict_eval']:.0f} s")

    def cpu_estimate(self, check):
        return E.CPU["import_openkbp"], "unpack and import the sample (CPU part)"

    def rehearse(self, check, s):
        try:
            _, h5 = openkbp_import(check, s)
            s.rehearsal_figures["imported"] = os.path.basename(h5)
            s.rehearsal = "PASS"
        except RuntimeError as ex:
            s.rehearsal_fail(str(ex))

    def run(self, check, s):
        try:
            data, h5 = openkbp_import(check, s)
        except RuntimeError as ex:
            s.fail(str(ex))
            return
        runs, name = os.path.join(check.work, "runs"), "gpucheck_openkbp"
        shutil.rmtree(os.path.join(runs, name), ignore_errors=True)
        common = ["--config", CFG]
        for k in (f"data.path={h5}", f"experiment.output_dir={runs}", f"experiment.name={name}", "data.cache=gpu",
                  "training.cuda_graph=on", "training.epochs=1000", f"training.max_minutes={check.args.minutes}",
                  "predict.split=val", "predict.tta=flips"):
            common += ["--set", k]
        rc, out = check.run(s, check.trainer + common, timeout=60 * check.args.minutes + 300, log_name="train")
        if rc != 0:
            s.fail(f"training exit {rc}: {check.last_line(out)}")
            return
        if "captured in a CUDA graph" not in out:
            s.fail("training did not capture its step in a CUDA graph")
        from .sections_resume import read_rows
        rows = read_rows(os.path.join(runs, name, "metrics.csv"))
        s.figures["epochs"] = len(rows)
        s.figures["epoch_seconds"] = [float(r["epoch_seconds"]) for r in rows if r.get("epoch_seconds")]
        s.figures["train_loss"] = [r.get("train_loss") for r in rows]
        rc, out = check.run(s, check.trainer + common + ["--predict-only"], timeout=600, log_name="predict")
        if rc != 0:
            s.fail(f"--predict-only exit {rc}: {check.last_line(out)}")
            return
        rc, out = check.run(s, check.trainer + ["evaluate", "openkbp", "--reference",
                                                os.path.join(data, "validation-pats"), "--predictions",
                                                os.path.join(runs, name, "predictions", "openkbp")],
                            timeout=300, log_name="evaluate")
        m1, m2 = re.search(r"dose score ([0-9.]+)", out), re.search(r"DVH score ([0-9.]+)", out)
        if rc != 0 or not m1 or not m2:
            s.fail(f"evaluate openkbp exit {rc}: {check.last_line(out)}")
        else:
            s.figures["dose_score_gy"], s.figures["dvh_score_gy"] = float(m1.group(1)), float(m2.group(1))
