"""The speed script's section 2 (scripts/bench/speed.sh): the GPU tests of the project's own kernels
on this GPU, before any network is timed. `model.fused_kernels: auto` turns a family on only on an
architecture that verified_architectures (src/model/fused_kernels.cpp) lists for it: its tests passed
there and its step measured no slower than ATen's. This section gives the first half per family, on
this GPU's architecture; the networks' fused-against-unfused table gives the second. Each GoogleTest
suite runs as its own process of u3d_gpu_tests (gpu-check's section 2 runs them among its core tests).
Without CUDA every one of them must skip itself (the CPU rehearsal checks that none passes)."""
import fnmatch

from . import estimates as E
from .sections_tests import CoreSuites, judge, list_tests

# cuDNN's graphs are no family: each network's norm layers timed three ways (section 3 on) give their
# difference from ATen beside their time, and gpu-check's section 2 runs their tests.
KERNEL_TESTS = ("FusedNormAct.*", "FusedLoss.*")
# The tests each family of model.fused_kernels (kernels/fused_families.h) must pass on an architecture.
# decoder_concat is no kernel of its own: the training steps with every family on cover it.
FAMILY_TESTS = {
    "batch_norm": ("FusedNormAct.*",),
    "group_norm": ("FusedNormAct.*",),
    "decoder_concat": ("FusedNormAct.TrainingStepsOfEveryNetworkFollowTheUnfusedOnes",),
    "loss": ("FusedLoss.*",),
}
# --plan without the test executable: its tests as written in tests/gpu/ (the run lists the real ones).
PLAN_TESTS = (
    "FusedNormAct.EqualsAtenForEveryNormDtypeActivationAndShape", "FusedNormAct.RunsAreBitwiseEqual",
    "FusedNormAct.CapturedWithItsBackwardReplaysOnNewValues",
    "FusedNormAct.TrainingStepsOfEveryNetworkFollowTheUnfusedOnes",
    "FusedLoss.EqualsAtenForBothHeadsEveryDtypeAndShape", "FusedLoss.KernelsApplyOnlyToWhatTheyTake",
    "FusedLoss.DeepSupervisionWithTheKernelsFollowsWithout", "FusedLoss.RunsAreBitwiseEqual",
    "FusedLoss.CapturedWithItsBackwardReplaysOnNewValues", "FusedLoss.CapturedSegmentationStepsFollowTheUnfusedOnes",
)


def matching(tests, patterns):
    return [t for t in tests if any(fnmatch.fnmatchcase(t, p) for p in patterns)]


def family_verdicts(results, arch):
    """{family: {"tests": n, "passed": n, "failed": [names], "verdict": text}} from {test: PASS | FAIL... |
    SKIPPED}; a family is verified on `arch` only when every one of its tests passed there."""
    out = {}
    for family, patterns in FAMILY_TESTS.items():
        mine = matching(sorted(results), patterns)
        passed = [t for t in mine if results[t] == "PASS"]
        failed = [t for t in mine if results[t].startswith("FAIL")]
        if not mine:
            verdict = "not run"
        elif failed:
            verdict = f"FAILED on {arch}: keep it out of verified_architectures"
        elif len(passed) == len(mine):
            verdict = f"passed on {arch}"
        else:
            verdict = f"skipped on {arch}: not verified"
        out[family] = {"tests": len(mine), "passed": len(passed), "failed": failed, "verdict": verdict}
    return out


class KernelTests(CoreSuites):
    num, sid, title = 2, "kernels", "Our kernels against ATen on this GPU: FusedNormAct, FusedLoss (per family)"

    def groups(self, check):
        tests = matching(check.shared.get("tests") or PLAN_TESTS, KERNEL_TESTS)
        out = {}
        for t in tests:
            out.setdefault(t.split(".")[0], []).append(t)
        return out

    def estimate(self, check):
        listing = 0.0 if check.shared.get("tests") else E.H100["test_process"]
        g = self.groups(check)
        n = sum(len(v) for v in g.values())
        return (listing + sum(E.suite_seconds(v) for v in g.values()),
                f"test listing; {len(g)} processes x {E.H100['test_process']:.0f} s + {n} tests (priced by name)")

    def common(self, check, s):
        if not check.shared.get("tests"):
            check.shared["tests"] = list_tests(check, s)
        return super().common(check, s)

    def run(self, check, s):
        results = self.common(check, s)
        arch = check.torch_side(s).info.get("capability") or "this GPU"
        s.figures.update(architecture=arch, families=family_verdicts(results, arch))
        judge(s, results)
        missing = [p for p in KERNEL_TESTS if not matching(check.shared["tests"], (p,))]
        if missing:
            s.partial(f"not in u3d_gpu_tests (renamed?): {', '.join(missing)}")


def kernels_rows(figs):
    """The report's table of the families: | family | its tests | on this GPU |."""
    rows = []
    for family, v in (figs.get("families") or {}).items():
        failed = f"; failed: {', '.join(v['failed'])}" if v["failed"] else ""
        rows.append(f"| {family} | {v['passed']} of {v['tests']} passed{failed} | {v['verdict']} |")
    return rows
