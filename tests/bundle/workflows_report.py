#!/usr/bin/env python3
"""Checks of the workflows' report (scripts/bench/workflows.sh) for tests/bundle/workflows_test.sh:

    workflows_report.py rehearsal DIR RC SECONDS DEADLINE OPENKBP(0|1)   a finished CPU rehearsal
    workflows_report.py plan PLAN.json                          --plan --deadline 480: 11-14 all start
    workflows_report.py killed DIR N                            what a run SIGKILLed in section N left
Prints what is wrong and exits 1. The layout, wait, killed and alive checks are gpu_check_report.py's.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check_report as g  # noqa: E402

WORKFLOWS = (11, 12, 13, 14)


def rehearsal(d, rc, seconds, deadline, openkbp):
    g.layout(d)
    rep = g.load(d)
    g.common(rep)
    g.check(rc == 0, f"exit {rc}")
    g.check(rep["finished"], "report not marked finished")
    g.check(seconds <= deadline + 5, f"{seconds} s for --deadline {deadline}")
    by = {s["num"]: s for s in rep["sections"]}
    for n, s in by.items():
        if n not in WORKFLOWS and n != 1:
            g.check(s["status"] == "SKIPPED" and "--only" in s["reason"], f"section {n} ran: {s['status']}")
    for n in WORKFLOWS:
        s = by[n]
        if n == 11 and not openkbp:
            g.check(s["status"] == "SKIPPED" and "--openkbp" in s["reason"], "section 11 without --openkbp")
            continue
        g.check(s["status"] == "SKIPPED" and s["rehearsal"] == "PASS",
                f"section {n}: GPU {s['status']}, rehearsal {s['rehearsal']} {s['rehearsal_reason']}")
        row = s["rehearsal_figures"].get("row") or {}
        g.check(row.get("epochs") == 2, f"section {n}: {row.get('epochs')} epochs in the rehearsal, expected 2")
        g.check((row.get("samples_per_s") or 0) > 0, f"section {n}: no samples/s")
        g.check(row.get("gpu_busy") is None, f"section {n}: a GPU busy share on the CPU: {row.get('gpu_busy')}")
        g.check(row.get("first_step_s") is not None and row.get("peak_host"),
                f"section {n}: no first-step time or peak host memory: {row}")
        score = row.get("score") or {}
        g.check(score and all(v is not None for v in score.values()), f"section {n}: score {score}")
        g.check(row.get("work_folder_mib") is not None, f"section {n}: no work folder size")
        g.check(len(s["commands"]) >= 4, f"section {n}: {len(s['commands'])} commands")
    with open(os.path.join(d, "gpu-report.md")) as f:
        md = f.read()
    g.check("## Workflows" in md, "gpu-report.md has no workflow table")
    g.check(md.count("(CPU rehearsal) |") == (4 if openkbp else 3), "gpu-report.md: not one row per workflow")
    files = g.logs(d)
    g.check(any("peak RSS" in t for t in files.values()), "no log records a peak RSS")


def plan(path):
    with open(path) as f:
        p = json.load(f)
    by = {s["num"]: s for s in p["sections"]}
    g.check(all(by[n]["starts"] for n in WORKFLOWS), f"sections 11-14 do not all start: "
            f"{[(n, by[n]['estimate_s'], by[n]['starts']) for n in WORKFLOWS]}")
    total = sum(by[n]["planned_s"] or 0 for n in (1,) + WORKFLOWS)
    g.check(total <= 480, f"sections 1, 11-14 planned at {total:.0f} s on an H100 (at most 480)")
    print(f"sections 1, 11-14: {total:.0f} s of 480")


def killed(d, n):
    g.layout(d)
    rep = g.load(d)
    g.common(rep)
    g.check(not rep["finished"] and rep["overall"] == "RUNNING", f"finished {rep['finished']}, {rep['overall']}")
    states = [s["state"] for s in rep["sections"]]
    g.check(states[:n - 1] == ["done"] * (n - 1), f"sections before {n} not done: {states}")
    g.check(states[n - 1] == "running", f"section {n} not running: {states}")
    g.check(all(x == "pending" for x in states[n:]), f"sections after {n} not pending: {states}")
    s = rep["sections"][n - 1]
    files = g.logs(d)
    g.check(len(files) >= len(s["commands"]) >= 1, f"{len(files)} logs for section {n}'s {len(s['commands'])} commands")
    last = sorted(files)[-1]
    g.check(s["commands"][-1].split()[0] in files[last].splitlines()[0],
            f"the running command's log {last} is not in the archive")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "rehearsal":
        rehearsal(args[0], int(args[1]), float(args[2]), float(args[3]), args[4] == "1")
    elif mode == "plan":
        plan(args[0])
    elif mode == "killed":
        killed(args[0], int(args[1]))
    else:
        sys.exit(f"unknown mode {mode}")
    for e in g.errors:
        print("FAIL:", e)
    sys.exit(1 if g.errors else 0)
