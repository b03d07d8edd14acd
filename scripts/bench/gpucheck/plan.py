"""The sections in the order of their value, and the loop that runs them against the deadline: a
section starts only when its estimate fits in the time left; without CUDA a GPU section is SKIPPED
(never PASS) and its CPU rehearsal runs where it has one. SIGTERM/SIGINT mark the running section
INTERRUPTED and write the report; a SIGKILL leaves the report of the last finished command."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

from .estimates import REPORT_RESERVE_S
from .report import Section
from .runner import Check, DeadlineHit
from .sections_more import DataBench, Profile, Variants
from .sections_resume import KillResume
from .sections_step import Compile, Mlperf, MlperfBatch, StepTime
from .sections_tests import CoreSuites, Facts, OtherSuites, TrainerBroken, split_tests
from .sections_workflows import WORKFLOWS

SPECS = [Facts(), CoreSuites(), StepTime(), KillResume(), Mlperf(), OtherSuites(), Variants(), DataBench(),
         Profile(), Compile()] + [w() for w in WORKFLOWS] + [MlperfBatch()]


def parse_only(text, specs=SPECS):
    """--only "1,3,kill-resume" -> {1, 3, 4}; SystemExit(2) naming an unknown section."""
    if not text:
        return None
    by_name = {sp.sid: sp.num for sp in specs}
    nums = {sp.num for sp in specs}
    out = set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.isdigit() and int(part) in nums:
            out.add(int(part))
        elif part in by_name:
            out.add(by_name[part])
        else:
            print(f"gpu-check: --only {part}: expected section numbers {min(nums)}-{max(nums)} or names "
                  f"{', '.join(by_name)}", file=sys.stderr)
            sys.exit(2)
    return out


def run_one(check, sp, s, only):
    if only and sp.num not in only and sp.num != 1:
        s.skip("not selected (--only)")
        s.state = "done"
        return
    why = sp.unavailable(check)
    if why:
        s.skip(why)
        s.state = "done"
        return
    gpu = check.cuda or sp.num == 1  # section 1 always runs: it finds out whether there is a GPU
    if gpu:
        est, basis = sp.estimate(check)
        first = sp.first_estimate(check)
    else:
        s.skip("no CUDA device")
        ce = sp.cpu_estimate(check)
        if ce is None:
            s.state = "done"
            return
        est, basis = ce
        first = est
    s.estimate_s, s.estimate_basis = round(est, 1), basis
    if not check.fits(first):
        if gpu:
            s.skip(check.no_fit_reason(est))
        else:
            s.rehearsal, s.rehearsal_reason = "SKIPPED", check.no_fit_reason(est)
        s.state = "done"
        return
    s.state, s.started = "running", time.time()
    if gpu:
        s.status = "RUNNING"
    else:
        s.rehearsal = "RUNNING"
    check.current = s
    check.write_report()
    try:
        if gpu:
            sp.run(check, s)
        else:
            sp.rehearse(check, s)
    except TrainerBroken as ex:
        s.fail(str(ex))
        raise
    except DeadlineHit as ex:
        if gpu:
            s.partial(f"stopped at the deadline: {ex}")
        else:
            s.rehearsal, s.rehearsal_reason = "PARTIAL", f"stopped at the deadline: {ex}"
    except Exception as ex:  # a crash in one section is that section's FAIL, not a lost report
        traceback.print_exc()
        msg = f"gpu-check error: {type(ex).__name__}: {ex}"
        s.fail(msg) if gpu else s.rehearsal_fail(msg)
    finally:
        s.measured_s = round(time.time() - s.started, 1)
        if s.status == "RUNNING":
            s.status = "PASS"
        if s.rehearsal == "RUNNING":
            s.rehearsal = "PASS"
        if sp.num == 1 and not check.cuda:  # priced as the CPU rehearsal it turned out to be
            est, s.estimate_basis = sp.cpu_estimate(check)
            s.estimate_s = round(est, 1)
        s.state = "done"
        check.current = None
        check.write_report()


def install_signals(check):
    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        s = check.current
        if s is not None and s.state == "running":
            if s.rehearsal == "RUNNING":  # a CPU rehearsal: the GPU part stays SKIPPED
                s.rehearsal, s.rehearsal_reason = "INTERRUPTED", f"{name} while it ran"
            else:
                s.reason = f"{name} while it ran" + (f"; before it: {s.reason}" if s.reason else "")
                s.status = "INTERRUPTED"
            s.state, s.measured_s = "done", round(time.time() - s.started, 1)
        for x in check.sections:
            if x.state == "pending":
                x.skip(f"not reached: {name}")
                x.state = "done"
        check.kill_current()
        check.write_report(finished=True)
        print(f"[gpu-check] {name}: report written to {check.report_dir}", file=sys.stderr, flush=True)
        os._exit(128 + signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)


def run_check(args, specs=SPECS, suite=None):
    """Runs `specs` (gpu-check's sections, or another suite's: scripts/bench/speed.sh) against the
    deadline; `suite`, when given, adds its title, header and closing lines to the report
    (Check.suite: title, header(check), tail(check))."""
    only = parse_only(args.only, specs)
    check = Check(args)
    check.suite = suite
    check.sections = [Section(sp.num, sp.sid, sp.title) for sp in specs]
    install_signals(check)
    check.write_report()
    for sp, s in zip(specs, check.sections):
        try:
            run_one(check, sp, s, only)
        except TrainerBroken:
            for x in check.sections:
                if x.state == "pending":
                    x.skip("trainer does not start (section 1)")
                    x.state = "done"
            break
    if check.torch is not None:
        check.torch.close()
    verdict = check.write_report(finished=True)
    print(f"[gpu-check] {verdict} in {check.elapsed():.0f} s: {check.report_dir}/gpu-report.md, gpu-report.json, "
          f"logs.tar.gz (work files: {check.work})", file=sys.stderr)
    return 1 if verdict == "FAIL" else 0


def print_plan(args, specs=SPECS, name="gpu-check"):
    """--plan: every section's estimate on one H100 and whether it would start under --deadline,
    assuming each takes its estimate. Runs nothing but the GPU test executable's listing (and that
    only when a section of `specs` runs tests)."""
    with tempfile.TemporaryDirectory() as tmp:
        args.report, args.work = os.path.join(tmp, "report"), os.path.join(tmp, "work")
        check = Check(args)
        check.cuda, check.gpus = True, 1
        try:
            if not any(isinstance(sp, CoreSuites) for sp in specs):
                raise OSError("no section of tests")
            out = subprocess.run(check.prefix + [check.test_exe(), "--gtest_list_tests"], capture_output=True,
                                 text=True, timeout=120).stdout
            tests, suite = [], ""
            for line in out.splitlines():
                if line.strip() and not line.startswith(("[", "Running", "Note:")):
                    if line.startswith(" "):
                        tests.append(suite + line.split("#")[0].strip())
                    else:
                        suite = line.split("#")[0].strip()
            core, others, unmatched = split_tests(tests)
            check.shared.update(tests=tests, core=core, others=others, unmatched=unmatched)
        except (OSError, subprocess.TimeoutExpired):
            pass
        only = parse_only(args.only, specs)
        rows, t = [], 0.0
        check.shared["plan_torch_started"] = False
        limit = (args.deadline - REPORT_RESERVE_S) if args.deadline else float("inf")
        for sp in specs:
            if (only and sp.num not in only and sp.num != 1) or sp.unavailable(check):
                rows.append({"num": sp.num, "id": sp.sid, "title": sp.title, "estimate_s": None, "starts": False})
                continue
            est, basis = sp.estimate(check)
            runs = sp.planned(check, limit - t)
            starts = runs > 0
            t += runs
            check.shared["plan_torch_started"] |= starts and sp.num in (3, 8, 9)
            rows.append({"num": sp.num, "id": sp.sid, "title": sp.title, "estimate_s": round(est, 1),
                         "first_s": round(sp.first_estimate(check), 1), "basis": basis, "starts": starts, "planned_s": round(runs, 1),
                         "cumulative_s": round(t, 1) if starts else None})
    for r in rows:
        est = "-" if r["estimate_s"] is None else f"{r['estimate_s']:.0f} s"
        part = "" if not r["starts"] or r["planned_s"] == r["estimate_s"] else f" ({r['planned_s']:.0f} s of it)"
        print(f"{r['num']:>2} {r['title'][:66]:<66} {est:>7}  {'starts' + part if r['starts'] else 'SKIPPED'}",
              file=sys.stderr)
    nothing = not any(r["starts"] for r in rows if r["num"] != 1)
    if nothing and args.deadline:
        cheapest = min((r["first_s"] for r in rows if r["num"] != 1 and r["estimate_s"]), default=0)
        print(f"{name}: --deadline {args.deadline:g} s is too short to start anything: the cheapest start of a "
              f"section needs {cheapest:.0f} s after section 1, and {REPORT_RESERVE_S:.0f} s are kept for the report",
              file=sys.stderr)
    print(f"{name}: planned {t:.0f} s of {args.deadline:g} s (H100 estimates)" if args.deadline else
          f"{name}: planned {t:.0f} s (H100 estimates, no deadline)", file=sys.stderr)
    print(json.dumps({"plan": name, "gpu": "H100 (constants in scripts/bench/gpucheck/estimates.py)",
                      "deadline_s": args.deadline, "total_s": round(t, 1), "starts_nothing": nothing,
                      "sections": rows}))
    return 0
