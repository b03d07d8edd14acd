"""Where the trainer and the test executables are, and how gpu-check runs them: each command's
output streams into its own log in the work folder while it runs, its timeout ends before the
deadline, its process group dies with it (and with gpu-check: PR_SET_PDEATHSIG), and the report
folder is rewritten after it. PyTorch runs in one process for the whole check (torch_side.py),
imported once; sections send it requests."""
import ctypes
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

from . import report
from .estimates import REPORT_RESERVE_S

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(BENCH))


class DeadlineHit(Exception):
    """No time is left before the deadline for the next command."""


def _child_setup():
    """In the child: its own process group (killed whole on a timeout) and SIGKILL when gpu-check
    dies, however it dies."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Check:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.deadline = args.deadline
        self.report_dir = os.path.abspath(args.report)
        report.prepare(self.report_dir)
        self.work = os.path.abspath(args.work)
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.n = 0
        self.bundle = os.path.exists(os.path.join(ROOT, "libexec", "u3d-run"))
        if self.bundle:
            self.trainer = [os.path.join(ROOT, "bin", "trainer")]
            self.prefix = [os.path.join(ROOT, "libexec", "u3d-run")]
            self.tests_dir = os.path.join(ROOT, "libexec", "tests")
        else:
            self.build = os.environ.get("U3D_BUILD_DIR", os.path.join(ROOT, "build", "release"))
            self.trainer = [os.path.join(self.build, "trainer")]
            self.prefix = []
            self.tests_dir = os.path.join(self.build, "tests")
        if args.trainer:
            self.trainer = [args.trainer]
        self.python = args.python
        self.cuda, self.gpus, self.gpu_name = False, 0, None
        self.peak_tflops = None
        self.sections, self.current, self.proc = [], None, None
        self.torch = None
        self.shared = {}  # what one section hands a later one (trainer step JSON, test list, ...)
        self.commit = self.source_commit()
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    # ---- time ------------------------------------------------------------------------------------
    def elapsed(self):
        return time.time() - self.t0

    def left(self):
        """Seconds left for work before the deadline (the report's reserve kept); inf without one."""
        if self.deadline is None:
            return float("inf")
        return self.deadline - self.elapsed() - REPORT_RESERVE_S

    def fits(self, estimate):
        return estimate <= self.left()

    def no_fit_reason(self, estimate):
        return (f"estimate {estimate:.0f} s does not fit the {max(0.0, self.left()):.0f} s left before the "
                f"deadline ({self.deadline:.0f} s)")

    # ---- commands --------------------------------------------------------------------------------
    def _log_path(self, section, log_name):
        self.n += 1
        return os.path.join(self.logs, f"{self.n:02d}-{section.sid}{'-' + log_name if log_name else ''}.log")

    def spawn(self, section, cmd, log_name=None, env=None, cwd=None, note=""):
        """Starts cmd with its output streaming into a new log; returns (Popen, log path)."""
        if self.left() < 2:
            raise DeadlineHit(f"no time left before the deadline for: {shlex.join(cmd)[:120]}")
        log = self._log_path(section, log_name)
        shown = shlex.join(cmd) + (f"  # {note}" if note else "")
        section.commands.append(shown)
        e = dict(os.environ)
        e.update(env or {})
        with open(log, "w") as f:
            f.write(f"$ {shown}\n")
        logf = open(log, "a")
        try:
            p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=e,
                                 cwd=cwd or self.work, preexec_fn=_child_setup)
        except OSError as ex:
            logf.write(f"[gpu-check] cannot run: {ex}\n")
            logf.close()
            raise RuntimeError(f"cannot run {cmd[0]}: {ex}")
        p.u3d_log, p.u3d_logf, p.u3d_t0 = log, logf, time.time()
        self.proc = p
        return p, log

    def finish(self, section, p, timed_out=False):
        """Closes a spawned command's log, records its end; returns (rc, output)."""
        p.u3d_logf.close()
        self.proc = None
        rc = 124 if timed_out else p.returncode
        took = time.time() - p.u3d_t0
        with open(p.u3d_log, "a") as f:
            f.write(f"\n# exit {rc}, {took:.1f} s{' (timed out)' if timed_out else ''}\n")
        with open(p.u3d_log, errors="replace") as f:
            out = f.read()
        print(f"[gpu-check] {section.sid}: exit {rc} in {took:.1f} s: {section.commands[-1][:150]}",
              file=sys.stderr, flush=True)
        self.write_report()
        return rc, out

    def run(self, section, cmd, timeout=600, env=None, cwd=None, log_name=None):
        """Runs cmd to its end or its timeout (which ends before the deadline); returns (rc, output)."""
        p, _ = self.spawn(section, cmd, log_name, env, cwd)
        limit = max(1.0, min(timeout, self.left()))
        try:
            p.wait(timeout=limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(p)
            p.wait()
            timed_out = True
            with open(p.u3d_log, "a") as f:
                f.write(f"\n[gpu-check] killed after {limit:.0f} s "
                        f"({'the deadline' if limit < timeout else 'its timeout'})\n")
        return self.finish(section, p, timed_out)

    def kill_current(self):
        if self.proc is not None and self.proc.poll() is None:
            _kill_group(self.proc)
        if self.torch is not None:
            self.torch.close(kill=True)

    # ---- parsing ---------------------------------------------------------------------------------
    @staticmethod
    def json_lines(out, kind):
        res = []
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("{") and f'"benchmark": "{kind}"' in line:
                try:
                    res.append(json.loads(line))
                except ValueError:
                    pass
        return res

    @staticmethod
    def last_line(out):
        lines = [l for l in out.strip().splitlines() if l.strip() and not l.startswith("# exit ")]
        errors = [l for l in lines if "] [error] " in l or l.startswith("trainer: ")]
        return (errors[0] if errors else lines[-1] if lines else "(no output)")[:300]

    # ---- shared steps ----------------------------------------------------------------------------
    def synth(self, section, name, size, cases, task="dose"):
        path = os.path.join(self.work, name)
        if os.path.exists(path):
            return path
        rc, out = self.run(section, self.trainer + ["synth", "--task", task, "--cases", str(cases), "--size",
                                                    str(size), "--seed", "0", "--out", path], timeout=300)
        if rc != 0:
            raise RuntimeError(f"trainer synth exit {rc}: {self.last_line(out)}")
        return path

    def test_exe(self):
        return os.path.join(self.tests_dir, "u3d_gpu_tests")

    def torch_side(self, section):
        """The one torch process, started on first use (its import is logged in this section)."""
        if self.torch is None or not self.torch.alive():
            from .torchside import TorchSide
            self.torch = TorchSide(self, section)
        return self.torch

    # ---- report ----------------------------------------------------------------------------------
    def source_commit(self):
        env = os.path.join(ROOT, "share", "unet3d-trainer", "bundle.env")
        if os.path.exists(env):
            with open(env) as f:
                m = re.search(r"^U3D_BUNDLE_COMMIT=(\S+)", f.read(), re.M)
                if m:
                    return m.group(1)
        try:
            return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                  text=True, timeout=30).stdout.strip() or "unknown"
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"

    def machine_facts(self):
        def grep(path, pattern, default=None):
            try:
                with open(path) as f:
                    m = re.search(pattern, f.read(), re.M)
                return m.group(1) if m else default
            except OSError:
                return default
        mem = grep("/proc/meminfo", r"MemTotal:\s*(\d+)")
        return {"hostname": socket.gethostname(),
                "os": grep("/etc/os-release", r'^PRETTY_NAME="?([^"\n]*)', platform.platform()),
                "kernel": platform.release(), "cpu": grep("/proc/cpuinfo", r"^model name\s*:\s*(.*)$", platform.processor()),
                "cores": os.cpu_count(), "memory_bytes": int(mem) * 1024 if mem else None,
                "layout": "bundle" if self.bundle else "build tree", "root": ROOT}

    def write_report(self, finished=False):
        fields = {"report": "gpu-check", "date": self.started, "seconds": round(self.elapsed(), 1),
                  "deadline_s": self.deadline, "commit": self.commit, "machine": self.machine_facts(),
                  "cuda": self.cuda, "gpu": self.gpu_name, "work": self.work,
                  "argv": sys.argv[1:]}
        for s in self.sections:
            if s.status == "RUNNING" and s.started is not None:
                s.measured_s = round(time.time() - s.started, 1)
        return report.write(self.report_dir, self.logs, fields, self.sections, self.cuda, finished)
