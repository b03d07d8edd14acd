#!/usr/bin/env python3
"""Checks of gpu-check's report folder for tests/bundle/gpu_check_test.sh (standard library):

    gpu_check_report.py full DIR RC SECONDS      a finished CPU rehearsal (--deadline 60)
    gpu_check_report.py plan PLAN.json           --plan --deadline 500: sections 1-4 <= 300 s
    gpu_check_report.py wait DIR N SECONDS       waits until section N runs (exit 1 if it never does)
    gpu_check_report.py killed DIR N             the folder a check SIGKILLed in section N left
    gpu_check_report.py alive WORK               no process runs in or names the work folder WORK
Prints what is wrong and exits 1.
"""
import json
import os
import sys
import tarfile
import time

NAMES = {"gpu-report.md", "gpu-report.json", "logs.tar.gz"}
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)
    return cond


def layout(d):
    """At most 8 plain files, no folder, none over 16 MiB, only the report's names."""
    entries = os.listdir(d)
    check(len(entries) <= 8, f"{len(entries)} entries in the report folder (at most 8)")
    for e in entries:
        p = os.path.join(d, e)
        check(os.path.isfile(p) and not os.path.islink(p), f"{e}: not a plain file")
        check(os.path.getsize(p) <= 16 * 2 ** 20, f"{e}: over 16 MiB")
        check(e in NAMES, f"{e}: not one of {sorted(NAMES)}")
    for n in NAMES:
        check(n in entries, f"no {n}")


def load(d):
    with open(os.path.join(d, "gpu-report.json")) as f:
        return json.load(f)


def logs(d):
    with tarfile.open(os.path.join(d, "logs.tar.gz")) as tar:
        members = tar.getmembers()
        for m in members:
            check(m.isfile() and m.name.startswith("logs/") and m.name.count("/") == 1, f"archive member {m.name}")
            check(m.size <= 210 * 1024, f"{m.name}: {m.size} bytes, not trimmed")
        return {m.name: tar.extractfile(m).read().decode(errors="replace") for m in members}


def common(rep):
    for k in ("date", "commit", "machine", "sections", "deadline_s"):
        check(rep.get(k), f"no {k}")
    check(rep.get("commit") != "unknown", "commit unknown")
    check([s["num"] for s in rep["sections"]] == list(range(1, 16)), "sections 1-15 expected")
    for s in rep["sections"]:
        check(s["rehearsal"] != "FAIL", f"section {s['num']}: rehearsal FAIL: {s['rehearsal_reason']}")
        if not rep["cuda"]:
            check(s["status"] in ("SKIPPED", "PENDING", "RUNNING") and s["status"] != "PASS",
                  f"section {s['num']}: {s['status']} without CUDA")
            if s["state"] == "done":
                check(s["status"] == "SKIPPED" and s["reason"], f"section {s['num']}: SKIPPED needs a reason")
        else:
            check(s["status"] != "FAIL", f"section {s['num']}: FAIL: {s['reason']}")
        if s["state"] == "done" and s["measured_s"] is not None:
            check(s["estimate_s"] is not None, f"section {s['num']} ran without an estimate")


def full(d, rc, seconds):
    layout(d)
    rep = load(d)
    common(rep)
    check(rep["finished"], "report not marked finished")
    check(rc == 0, f"exit {rc}")
    check(seconds <= 65, f"{seconds} s for --deadline 60")
    check(rep["overall"] in ("REHEARSAL PASS", "PASS", "PARTIAL"), f"overall {rep['overall']}")
    by = {s["num"]: s for s in rep["sections"]}
    for n in (1, 2, 3, 4):
        s = by[n]
        check(s["state"] == "done" and s["measured_s"] is not None and s["estimate_s"] is not None,
              f"section {n}: not run, or without estimate and measured time ({s['status']}, {s['reason']})")
        if not rep["cuda"]:
            check(s["rehearsal"] in ("PASS", "SKIPPED"), f"section {n}: rehearsal {s['rehearsal']}")
    if not rep["cuda"]:
        check(by[4]["rehearsal_figures"].get("weights_equal") is True, "section 4 rehearsal: weights not equal")
        check(by[2]["rehearsal_figures"].get("results") == ["SKIPPED"], "section 2 rehearsal: tests did not skip")
    files = logs(d)
    check(any("--version" in t.splitlines()[0] for t in files.values()), "no trainer --version log")
    check(len(files) >= 8, f"only {len(files)} logs")
    with open(os.path.join(d, "gpu-report.md")) as f:
        md = f.read()
    check("| 4 |" in md and "estimate" in md, "gpu-report.md lacks the section table")


def plan(path):
    with open(path) as f:
        p = json.load(f)
    by = {s["num"]: s for s in p["sections"]}
    total = sum(by[n]["estimate_s"] or 0 for n in (1, 2, 3, 4))
    check(all(by[n]["starts"] for n in (1, 2, 3, 4)), "sections 1-4 do not all start under --deadline 500")
    check(total <= 300, f"sections 1-4 estimated at {total:.0f} s on an H100 (at most 300)")
    print(f"sections 1-4: {total:.0f} s of 300")


def wait(d, n, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            rep = load(d)
            s = rep["sections"][n - 1]
            if s["state"] == "running" and s["commands"]:
                return
            if s["state"] == "done":
                sys.exit(f"section {n} ended before it could be killed")
        except (OSError, ValueError, IndexError, KeyError):
            pass
        time.sleep(0.05)
    sys.exit(f"section {n} did not start in {seconds} s")


def killed(d, n):
    layout(d)
    rep = load(d)
    common(rep)
    check(not rep["finished"] and rep["overall"] == "RUNNING", f"finished {rep['finished']}, {rep['overall']}")
    states = [s["state"] for s in rep["sections"]]
    check(states[:n - 1] == ["done"] * (n - 1), f"sections before {n} not done: {states}")
    check(states[n - 1] == "running", f"section {n} not running: {states}")
    check(all(x == "pending" for x in states[n:]), f"sections after {n} not pending: {states}")
    files = logs(d)
    done_cmds = sum(len(s["commands"]) for s in rep["sections"][:n])
    check(len(files) >= done_cmds, f"{len(files)} logs for the {done_cmds} commands finished")
    check(any("--version" in t.splitlines()[0] for t in files.values()), "no trainer --version log")
    with open(os.path.join(d, "gpu-report.md")) as f:
        md = f.read()
    check("RUNNING" in md and all(f"## {i}." in md for i in range(1, n)), "gpu-report.md lacks the finished sections")


def alive(work):
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd.startswith(work) or work in cmd) and "gpu_check_report.py" not in cmd:
            check(False, f"process {pid} of the killed check is alive: {cmd[:150]} (in {cwd})")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "full":
        full(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "plan":
        plan(sys.argv[2])
    elif mode == "wait":
        wait(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif mode == "killed":
        killed(sys.argv[2], int(sys.argv[3]))
    elif mode == "alive":
        alive(sys.argv[2])
    if errors:
        sys.exit("FAIL: " + "; ".join(errors))
