#!/usr/bin/env python3
"""gpu-check: the figures that matter from a new GPU box, in the order of their value, within a hard
time limit, in a report that survives a kill. Run through scripts/gpu-check.sh:

    scripts/gpu-check.sh --deadline 500 --report DIR [--work DIR] [--only 1,3] [--openkbp DIR|tar.xz]
    scripts/gpu-check.sh --plan --deadline 500        # each section's H100 estimate; runs nothing

Sections, by value: (1) facts: GPU, driver, trainer --version, the launcher's --print; (2) the core
GPU suites; (3) step time of the OpenKBP baseline and the nnU-Net-like network, graph on and off,
against PyTorch eager; (4) SIGKILL mid-epoch in GPU training and --resume, bit for bit; (5) the
MLPerf 3D U-Net; (6) the other GPU suites, one process each; (7) data-parallel NCCL (world size 1)
with the captured step, and the fp16 captured step; (8) the GPU data benchmark; (9) the profile;
(10) torch.compile on the PyTorch side; (11-14) the users' workflows end to end (gpucheck/
sections_workflows.py, scripts/bench/workflows.sh): OpenKBP on the real sample (only with
--openkbp), 2D slices, thin surfaces, nnU-Net-style segmentation, each trained for --minutes; (15) the
MLPerf 3D U-Net's samples/s per batch (2, 4, 7, 8; graph on).

DIR holds gpu-report.md, gpu-report.json and logs.tar.gz only, rewritten after every command; the
bulky work files live in --work (default under /tmp). Works from the release bundle (bin/trainer,
libexec/tests/) or a build tree (build/release, or U3D_BUILD_DIR). Standard library only; PyTorch
is imported once, in scripts/bench/torch_side.py. Exit 0 when nothing FAILed, 1 otherwise, 2 on
bad arguments; 128 + N after signal N.
"""
import datetime
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_args import Parser  # noqa: E402
from gpucheck import plan, sections_speed  # noqa: E402
from gpucheck.runner import filesystem_of  # noqa: E402
from gpucheck.report import REPORT_FILES  # noqa: E402


def main():
    p = Parser(prog="gpu-check", description=__doc__.split("\n")[0])
    p.add_argument("--report", "--out", dest="report", default=None,
                   help="report folder: gpu-report.md, gpu-report.json, logs.tar.gz (default gpu-check-<date>)")
    p.add_argument("--work", default=None, help="folder for the bulky work files (default under /tmp)")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds from the start: no section starts whose estimate does not fit, every command "
                        "ends before it (default: none; --quick: 300)")
    p.add_argument("--only", default=None, help="sections to run, e.g. 1,3 or step-time,kill-resume (1 always runs)")
    p.add_argument("--quick", action="store_true", help="--deadline 300 unless --deadline is given")
    p.add_argument("--plan", action="store_true", help="print each section's estimate on an H100 and exit")
    p.add_argument("--openkbp", default=None, help="OpenKBP data: provided-data folder or openkbp-sample.tar.xz")
    p.add_argument("--minutes", type=float, default=1.0, help="sections 11-14: training minutes of each workflow (training.max_minutes)")
    p.add_argument("--trainer", default=None, help="trainer to check (default: the bundle's or build/release's); its "
                   "folder's tests/u3d_gpu_tests, where there is one, are the GPU tests run")
    p.add_argument("--python", default=os.environ.get("U3D_PYTHON") or shutil.which("python3") or sys.executable,
                   help="Python with torch for the PyTorch side (default U3D_PYTHON or python3)")
    p.add_argument("--suite", choices=["gpu-check", "speed"], default="gpu-check",
                   help="speed: scripts/bench/speed.sh's sections (gpucheck/sections_speed.py) instead of gpu-check's")
    p.add_argument("--part", choices=sorted(sections_speed.PARTS), default=None,
                   help="--suite speed: part 1 (OpenKBP, MLPerf), 2 (nnU-Net-like, 2D slices) or all")
    a = p.parse_args()
    speed = a.suite == "speed"
    if a.part and not speed:
        p.error(f"--part {a.part}: only with --suite speed (scripts/bench/speed.sh)")
    a.part = a.part or "all"
    if speed:
        p.prog = "speed.sh"
        if not a.plan and not a.report:
            p.error("--report: expected the report folder (--report DIR)")
        if a.deadline is None:
            p.error("--deadline: expected the seconds the run may take (--deadline SECONDS)")
    specs = sections_speed.specs(a.part) if speed else plan.SPECS
    suite = sections_speed.SpeedReport(a) if speed else None
    if a.quick and a.deadline is None:
        a.deadline = 300.0
    if a.deadline is not None and not (math.isfinite(a.deadline) and a.deadline > 0):
        p.error(f"--deadline {a.deadline:g}: expected a positive number of seconds")
    if not (math.isfinite(a.minutes) and a.minutes > 0):
        p.error(f"--minutes {a.minutes:g}: expected a positive number of minutes")
    if a.openkbp:
        if not os.path.exists(a.openkbp):
            p.error(f"--openkbp {a.openkbp}: no such file or folder; expected provided-data/ or openkbp-sample.tar.xz")
        a.openkbp = os.path.abspath(a.openkbp)
    if a.plan:
        return plan.print_plan(a, specs, p.prog)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    a.report = a.report or "gpu-check-" + stamp
    if not a.work:  # under /tmp, unless /tmp is memory (tmpfs): the workflows write gigabytes
        tmp = tempfile.gettempdir()
        base = os.getcwd() if filesystem_of(tmp)[1] == "tmpfs" else tmp
        a.work = os.path.join(base, f"gpu-check-work-{stamp}-{os.getpid()}")
    check_paths(p, a)
    return plan.run_check(a, specs, suite)


def check_paths(p, a):
    """Usable --report and --work folders, or one line and exit 2 (argparse's error): each a folder
    or creatable, writable, apart (neither inside the other: the report folder holds its three files
    only), the report folder empty but for an earlier report's files."""
    report, work = os.path.abspath(a.report), os.path.abspath(a.work)
    for flag, path in (("--report", report), ("--work", work)):
        if os.path.exists(path) and not os.path.isdir(path):
            p.error(f"{flag} {path}: a file, not a folder")
        probe = path
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe):
            p.error(f"{flag} {path}: {probe} is a file, not a folder")
        try:  # a real write: permission bits do not stop root, a read-only file system does
            fd, tmp = tempfile.mkstemp(dir=probe, prefix=".gpu-check-probe-")
            os.close(fd)
            os.remove(tmp)
        except OSError as ex:
            p.error(f"{flag} {path}: cannot write in {probe} ({ex.strerror})")
    if report == work or report.startswith(work + os.sep) or work.startswith(report + os.sep):
        p.error(f"--report {report} and --work {work} must be apart: the report folder holds only "
                + ", ".join(REPORT_FILES))
    if os.path.isdir(report):
        other = sorted(n for n in os.listdir(report) if n not in REPORT_FILES
                       and not (n.startswith(".") and n.endswith(".tmp")))
        if other:
            p.error(f"--report {report} holds {other[0]}; give an empty or new folder (the report folder holds "
                    f"only {', '.join(REPORT_FILES)})")


if __name__ == "__main__":
    sys.exit(main())
