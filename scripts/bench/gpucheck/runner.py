"""Where the trainer and the test executables are, and how gpu-check runs them: each command's
output streams into its own log in the work folder while it runs, its timeout ends before the
deadline, its process group dies with it (and with gpu-check: PR_SET_PDEATHSIG), and the report
folder is rewritten before it starts (the command is listed) and after it. While a command runs,
two caps guard the box (a lost box returns nothing): the host's available memory and the free
space of the work folder's file system (tmpfs /tmp is memory); a command that drives either below
its floor is stopped, and its log and the report say which. Each command's peak resident set
(wait4's ru_maxrss) and the work folder's size after it are logged. PyTorch runs in one process
for the whole check (torch_side.py), imported once; sections send it requests."""
import csv
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time

from . import report
from .estimates import REPORT_RESERVE_S
from .procs import BENCH, ROOT, DeadlineHit, _child_setup, _kill_group  # noqa: F401 (re-exported)
from .torchside import TorchSide

HOST_MEMORY_FLOOR = 2 * 2 ** 30  # stop a command when MemAvailable falls below this (or 5% of RAM)
DISK_FLOOR = 2 * 2 ** 30         # stop a command when the work folder's file system has less free


def read_rows(path):
    """The rows of a CSV file with a header (a run's metrics.csv) as dicts; [] when it does not exist."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def meminfo():
    """{field: bytes} of /proc/meminfo (empty where it cannot be read)."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                parts = v.split()
                if parts and parts[0].isdigit():
                    out[k] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def filesystem_of(path):
    """(mount point, type) of the file system holding `path` (/proc/mounts, longest prefix)."""
    best = ("/", "unknown")
    path = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and (path == fields[1] or path.startswith(fields[1].rstrip("/") + "/")) \
                        and len(fields[1]) >= len(best[0]):
                    best = (fields[1], fields[2])
    except OSError:
        pass
    return best


def folder_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def over_cap(work):
    """Why a running command must stop now to keep the box answering, or None."""
    mem = meminfo()
    avail, total = mem.get("MemAvailable"), mem.get("MemTotal")
    if avail is not None and total:
        floor = max(HOST_MEMORY_FLOOR, total // 20)
        if avail < floor:
            return (f"host memory nearly exhausted: {avail / 2 ** 30:.1f} GiB available of {total / 2 ** 30:.0f} GiB "
                    f"(floor {floor / 2 ** 30:.1f} GiB)")
    try:
        st = os.statvfs(work)
        free = st.f_bavail * st.f_frsize
        if free < DISK_FLOOR:
            mount, kind = filesystem_of(work)
            return (f"work folder's file system nearly full: {free / 2 ** 30:.1f} GiB free on {mount} ({kind}"
                    f"{', i.e. host memory' if kind == 'tmpfs' else ''}; floor {DISK_FLOOR / 2 ** 30:.0f} GiB)")
    except OSError:
        pass
    return None


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
            beside = os.path.join(os.path.dirname(os.path.abspath(args.trainer)), "tests")
            if os.path.exists(os.path.join(beside, "u3d_gpu_tests")):  # a build tree's: the tests built with it
                self.tests_dir = beside
        self.python = args.python
        self.cuda, self.gpus, self.gpu_name = False, 0, None
        self.peak_tflops = None
        self.sections, self.current, self.proc = [], None, None
        self.last_peak_rss, self.last_work_bytes = None, 0  # of the last command run()
        self.torch = None
        self.suite = None  # another suite's report parts (plan.run_check): title, header(check), tail(check)
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
        self.write_report()  # the command is listed before it starts: a lost box still says what ran
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

    def finish(self, section, p, timed_out=False, peak_rss=None):
        """Closes a spawned command's log, records its end (exit, time, peak resident set, the work
        folder's size); returns (rc, output)."""
        p.u3d_logf.close()
        self.proc = None
        rc = 124 if timed_out else p.returncode
        took = time.time() - p.u3d_t0
        self.last_peak_rss = peak_rss
        self.last_work_bytes = folder_bytes(self.work)
        rss = f", peak RSS {peak_rss / 2 ** 20:.0f} MiB" if peak_rss else ""
        with open(p.u3d_log, "a") as f:
            f.write(f"\n# exit {rc}, {took:.1f} s{' (timed out)' if timed_out else ''}{rss}, "
                    f"work folder {self.last_work_bytes / 2 ** 20:.0f} MiB\n")
        with open(p.u3d_log, errors="replace") as f:
            out = f.read()
        print(f"[gpu-check] {section.sid}: exit {rc} in {took:.1f} s: {section.commands[-1][:150]}",
              file=sys.stderr, flush=True)
        self.write_report()
        return rc, out

    def run(self, section, cmd, timeout=600, env=None, cwd=None, log_name=None):
        """Runs cmd to its end, its timeout (which ends before the deadline) or a cap (over_cap);
        returns (rc, output). A command stopped by a cap is killed (rc -9) and its log's last line says why."""
        p, _ = self.spawn(section, cmd, log_name, env, cwd)
        limit = max(1.0, min(timeout, self.left()))
        end, why = time.time() + limit, None
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() >= end:
                why = f"killed after {limit:.0f} s ({'the deadline' if limit < timeout else 'its timeout'})"
            else:
                cap = over_cap(self.work)
                why = f"stopped: {cap}" if cap else None
            if why:
                _kill_group(p)
                _, status, usage = os.wait4(p.pid, 0)
                with open(p.u3d_log, "a") as f:
                    f.write(f"\n[gpu-check] {why}\n")
                break
            time.sleep(0.2)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        timed_out = why is not None and why.startswith("killed after")
        return self.finish(section, p, timed_out, peak_rss=usage.ru_maxrss * 1024)

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
        if self.suite is not None:
            fields.update(title=self.suite.title, header=self.suite.header(self), tail=self.suite.tail(self))
        for s in self.sections:
            if s.status == "RUNNING" and s.started is not None:
                s.measured_s = round(time.time() - s.started, 1)
        return report.write(self.report_dir, self.logs, fields, self.sections, self.cuda, finished)
