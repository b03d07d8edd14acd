"""Sections 1 (facts), 2 (the core GPU suites) and 5 (the other GPU suites). Every GoogleTest suite
of u3d_gpu_tests runs as its own process (--gtest_filter=Suite.*), so one sticky CUDA error fails
that suite alone; section 2 runs the core tests of their suites, section 5 the rest of every suite."""
import fnmatch
import json
import os
import re
import shutil
import subprocess

from . import estimates as E
from .runner import ROOT

# The core GPU tests (section 2): a captured bf16 step equals eager, the optimizers, channels-last,
# the OpenKBP and segmentation captures, the fused norm kernels. Patterns over "Suite.Test" names.
CORE_TESTS = (
    "GpuTrainStep.GraphReplayFollowsEagerInBf16",
    "GpuTrainStep.GraphReplayGivesTheEagerLossesBitwiseInDeterministicFp32",
    "GpuOptimizer.*",
    "GpuFixes.ChannelsLastParametersGoThroughEveryFusedOptimizer",
    "GpuFixes.OpenKbpBaselineStepWithBatchNormAndDropoutCaptures",
    "GpuFixes.SegmentationStepWithDeepSupervisionCapturesAndEqualsEager",
    "FusedNormAct.*",  # our CUDA kernels against ATen (kernels/; model.fused_kernels auto waits on them)
    "FusedLoss.*",  # the fused Dice + CE and BCE + Dice kernels against the ATen losses
    "CudnnNormAct.*",  # cuDNN's fused norm + activation graphs against ATen (or refused in cuDNN's words)
    "NormBench.*",  # trainer bench-norm: ATen, ours and cuDNN's graphs timed on one GPU
)


class TrainerBroken(RuntimeError):
    """trainer --version failed: nothing else can run."""


class Spec:
    """A section: its number, id, title, estimates and its GPU run and CPU rehearsal."""
    num, sid, title = 0, "", ""

    def unavailable(self, check):
        return None

    def estimate(self, check):
        return 0.0, ""

    def first_estimate(self, check):
        """What must fit for the section to start (its whole estimate, unless its items are independent)."""
        return self.estimate(check)[0]

    def cpu_estimate(self, check):
        return None  # no CPU rehearsal

    def planned(self, check, left):
        """--plan: seconds this section would take with `left` seconds left (0: it would not start)."""
        return self.estimate(check)[0] if self.first_estimate(check) <= left else 0.0

    def run(self, check, s):
        raise NotImplementedError

    def rehearse(self, check, s):
        pass


def list_tests(check, s):
    """{"Suite.Test": ...} in listing order, from u3d_gpu_tests --gtest_list_tests."""
    exe = check.test_exe()
    rc, out = check.run(s, check.prefix + [exe, "--gtest_list_tests"], timeout=120, log_name="list")
    tests, suite = [], ""
    for line in out.splitlines()[1:]:
        if not line.strip() or line.startswith(("[", "#", "Running", "Note:")):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            tests.append(suite + line.split("#")[0].strip())
    if rc != 0 or not tests:
        raise RuntimeError(f"{os.path.basename(exe)} --gtest_list_tests exit {rc}: {check.last_line(out)}")
    return tests


def split_tests(tests):
    """(core {suite: [tests]}, others {suite: [tests]}, core patterns matching nothing)."""
    core, others, unmatched = {}, {}, []
    for pat in CORE_TESTS:
        if not any(fnmatch.fnmatchcase(t, pat) for t in tests):
            unmatched.append(pat)
    for t in tests:
        into = core if any(fnmatch.fnmatchcase(t, p) for p in CORE_TESTS) else others
        into.setdefault(t.split(".")[0], []).append(t)
    return core, others, unmatched


def suite_filter(suite, tests, all_tests):
    whole = [t for t in all_tests if t.split(".")[0] == suite]
    if sorted(tests) == sorted(whole):
        return f"{suite}.*"
    if len(tests) <= len(whole) - len(tests):
        return ":".join(tests)
    return f"{suite}.*-" + ":".join(t for t in whole if t not in tests)


def run_suite(check, s, suite, tests, all_tests, timeout):
    """One process for `tests` of `suite`; {test: PASS | FAIL | SKIPPED | FAIL (...)}."""
    env = {"U3D_SOURCE_DIR": ROOT} if check.bundle else {}
    if check.shared.get("python_has_torch"):
        env["U3D_TORCH_PYTHON"] = check.python
    ok = check.args.openkbp
    if ok and os.path.basename(ok) == "openkbp-sample.tar.xz":
        env["U3D_SHARED_DATA"] = os.path.dirname(ok)
    js = os.path.join(check.logs, f"gtest-{suite}.json")
    flt = suite_filter(suite, tests, all_tests)
    rc, out = check.run(s, check.prefix + [check.test_exe(), f"--gtest_filter={flt}", f"--gtest_output=json:{js}"],
                        timeout=timeout, env=env, log_name=suite)
    got = {}
    if os.path.exists(js):
        try:
            with open(js) as f:
                for ts in json.load(f).get("testsuites", []):
                    for t in ts.get("testsuite", []):
                        name = f"{ts['name']}.{t['name']}"
                        if t.get("failures"):
                            got[name] = "FAIL"
                        elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                            got[name] = "SKIPPED"
                        else:
                            got[name] = "PASS"
        except (OSError, ValueError):
            pass
    why = "timed out" if rc == 124 else f"exit {rc}"
    res = {t: got.get(t, f"FAIL (no result; the process: {why})") for t in tests}
    if rc != 0 and all(v == "PASS" for v in got.values()):
        s.fail(f"{suite}: exit {rc} with no failing test: {check.last_line(out)}")
    return res


def judge(s, results):
    failed = [n for n, v in results.items() if v.startswith("FAIL")]
    skipped = [n for n, v in results.items() if v == "SKIPPED"]
    s.figures["tests"] = results
    s.figures["passed"] = sum(v == "PASS" for v in results.values())
    s.figures["failed"], s.figures["skipped"] = len(failed), len(skipped)
    if failed:
        s.fail(f"{len(failed)} of {len(results)} tests failed: {', '.join(failed[:8])}")
    if skipped:
        s.notes.append(f"skipped on this CUDA machine: {', '.join(skipped)}")
    if results and s.figures["passed"] == 0:
        s.fail("no test passed")


class Facts(Spec):
    num, sid, title = 1, "facts", "Facts: GPU, driver, trainer --version, the launcher's --print"
    with_tests = True  # list u3d_gpu_tests (the sections of tests need the listing; the speed script does not)

    def estimate(self, check):
        k = E.H100
        return 2 * k["trainer_start"] + 2.0, "trainer --version, test listing: 2 starts; nvidia-smi, launcher 2 s"

    def cpu_estimate(self, check):
        return E.CPU["trainer_start"] + E.CPU["test_list"] + 1.0, "trainer --version, test listing, launcher"

    def run(self, check, s):
        """Always runs (it finds out whether there is a GPU); without CUDA its figures are the
        rehearsal's and the section is SKIPPED."""
        figs = s.figures
        rc, out = check.run(s, check.trainer + ["--version"], timeout=120, log_name="version")
        if rc != 0:
            raise TrainerBroken(f"trainer --version exit {rc}: {check.last_line(out)}")
        m = re.search(r"^trainer (\S+) \((\S+)\)", out, re.M)
        figs["trainer"] = m.group(1) if m else None
        check.commit = m.group(2) if m else check.commit
        for key, pat in (("libtorch", r"^LibTorch (\S+)"), ("cuda_runtime", r"^CUDA runtime (\S+):"),
                         ("cudnn", r"^cuDNN (\S+)")):
            m = re.search(pat, out, re.M)
            figs[key] = m.group(1) if m else None
        m = re.search(r"^CUDA runtime \S+: (\d+) device", out, re.M)
        check.gpus = int(m.group(1)) if m else 0
        check.cuda = check.gpus > 0
        figs["cuda_devices"] = check.gpus
        problems = []
        if check.prefix:
            rc, out = check.run(s, check.prefix + ["--print"], timeout=60, log_name="launcher")
            if rc != 0:
                problems.append(f"libexec/u3d-run --print exit {rc}: {check.last_line(out)}")
            for line in out.splitlines():
                k, _, v = line.partition("=")
                if k in ("bundle_version", "built_for", "torch_version", "torch_cuda", "torch_lib", "torch_source"):
                    figs["launcher_" + k] = v
        # Whether the Python has torch, found without importing it (the torch process imports it once).
        try:
            r = subprocess.run([check.python, "-c", "import importlib.util as u; print(bool(u.find_spec('torch')))"],
                               capture_output=True, text=True, timeout=30)
            check.shared["python_has_torch"] = r.stdout.strip() == "True"
        except (OSError, subprocess.TimeoutExpired, TypeError):
            check.shared["python_has_torch"] = False
        figs["python"] = f"{check.python} ({'with' if check.shared['python_has_torch'] else 'without'} torch)"
        try:
            if self.with_tests:
                tests = list_tests(check, s)
                core, others, unmatched = split_tests(tests)
                check.shared.update(tests=tests, core=core, others=others, unmatched=unmatched)
                figs["gpu_tests"] = f"{len(tests)} tests in {len(core.keys() | others.keys())} suites"
        except RuntimeError as ex:
            problems.append(str(ex))
        if not check.cuda:
            s.rehearsal_figures, s.figures = figs, {}
            s.rehearsal_verdict(problems)
            s.skip("no CUDA device (trainer --version: 0 devices or a CPU-only LibTorch)")
            return
        for p in problems:
            s.fail(p)
        if shutil.which("nvidia-smi"):
            rc, out = check.run(s, ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                    "--format=csv,noheader"], timeout=60, log_name="nvidia-smi")
            rows = [l for l in out.splitlines()[1:] if "," in l]
            if rc == 0 and rows:
                f = [x.strip() for x in rows[0].split(",")]
                s.figures.update({"gpu": f[0], "gpu_memory": f[1] if len(f) > 1 else None,
                                  "driver": f[2] if len(f) > 2 else None, "gpus": len(rows)})
                check.gpu_name = f[0]
            else:
                s.partial(f"nvidia-smi exit {rc}: {check.last_line(out)}")
        else:
            s.partial("nvidia-smi is not on PATH: GPU name and driver not read")


class CoreSuites(Spec):
    num, sid, title = 2, "core-suites", "Core GPU suites: captured bf16 step = eager, optimizers, channels-last, captures"

    def groups(self, check):
        core = check.shared.get("core")
        if core is None:  # no listing (plan without the executable): the patterns' suites
            core = {}
            for p in CORE_TESTS:
                core.setdefault(p.split(".")[0], []).append(p)
        return core

    def estimate(self, check):
        g = self.groups(check)
        n = sum(len(v) for v in g.values())
        return (sum(E.suite_seconds(v) for v in g.values()),
                f"{len(g)} processes x {E.H100['test_process']:.0f} s + {n} tests x {E.H100['test']:.0f} s")

    def cpu_estimate(self, check):
        g = self.groups(check)
        return len(g) * 2.0, f"{len(g)} test processes, every test skips itself without CUDA"

    def common(self, check, s):
        for p in check.shared.get("unmatched", []):
            s.notes.append(f"core test {p} is not in u3d_gpu_tests (renamed?)")
        results = {}
        for suite, tests in self.groups(check).items():
            timeout = max(120.0, 3 * E.suite_seconds(tests))
            results.update(run_suite(check, s, suite, tests, check.shared["tests"], timeout))
        return results

    def run(self, check, s):
        judge(s, self.common(check, s))
        if check.shared.get("unmatched"):
            s.partial("core tests not found: " + ", ".join(check.shared["unmatched"]))

    def rehearse(self, check, s):
        results = self.common(check, s)
        s.rehearsal_figures["processes"] = {k: len(v) for k, v in self.groups(check).items()}
        s.rehearsal_figures["results"] = sorted(set(results.values()))
        bad = [n for n, v in results.items() if v != "SKIPPED"]
        if bad:  # without CUDA every GPU test must skip itself (never pass on the CPU)
            s.rehearsal_fail(f"without CUDA these did not skip: {', '.join(bad[:5])}")
        else:
            s.rehearsal = "PASS"


class OtherSuites(CoreSuites):
    num, sid, title = 6, "other-suites", "The other GPU suites, one process each"

    def groups(self, check):
        return check.shared.get("others") or {}

    def estimate(self, check):
        g = self.groups(check)
        if not g:
            return 0.0, "no test listing"
        n = sum(len(v) for v in g.values())
        return (sum(E.suite_seconds(v) for v in g.values()),
                f"{len(g)} processes x {E.H100['test_process']:.0f} s + {n} tests (heavier ones priced by name)")

    def first_estimate(self, check):
        g = self.groups(check)
        return min((E.suite_seconds(v) for v in g.values()), default=0.0)

    def cpu_estimate(self, check):
        return None

    def planned(self, check, left):
        t = 0.0
        for tests in self.groups(check).values():
            if t + E.suite_seconds(tests) <= left:
                t += E.suite_seconds(tests)
        return t

    def run(self, check, s):
        results, left_out = {}, []
        for suite, tests in self.groups(check).items():
            est = E.suite_seconds(tests)
            if not check.fits(est):
                left_out.append(f"{suite} ({est:.0f} s)")
                continue
            results.update(run_suite(check, s, suite, tests, check.shared["tests"], max(120.0, 3 * est)))
        judge(s, results)
        if left_out:
            s.partial(f"not run, their estimates did not fit before the deadline: {', '.join(left_out)}")
