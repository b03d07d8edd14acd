#!/usr/bin/env python3
"""Runs a tutorial page's commands as a reader would, and checks the output it documents
(ctest `tutorial.<name>`, label integration).

  run_tutorials.py --trainer PATH --source DIR [--shared DIR] [--python PY] PAGE.md [--keep] [--show]
  run_tutorials.py --self-check

The page's ```bash blocks run in order, each with `bash -euo pipefail`, in a fresh folder that looks
like the repository root to them: configs/, scripts/ and tests/ are links to the source tree's, and
../shared/data is a link to the shared data folder (--shared, the build's U3D_SHARED_DATA_DIR).
`trainer` is the build's (its folder first on PATH), `python3` the test venv's (--python, a venv's
bin/python: it has pydicom, rt-utils, Pillow, tifffile, nibabel). Blocks fenced as ```bash norun are shown to the reader and not run.

A block documents its output with comment lines `# expect: TEXT`: TEXT must occur in what the block
printed (stdout and stderr together; runs of white space compare equal). The runner fails, naming the
page, the block (its number and first line) and the command, when a block exits non-zero or an
expected line is missing, and prints the block's last output lines. Exit 0 when every block passes,
77 (skipped) when the page needs the shared data or the test venv and they are missing. --keep keeps
the folder, --show prints every block's output (to compare with the page's ```text blocks).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```(\S*)[ \t]*(\S*)[ \t]*$")
SKIPPED = 77  # ctest SKIP_RETURN_CODE: what the page needs is not on this machine
EXPECT = re.compile(r"^\s*#\s*expect:\s*(.*?)\s*$")


def blocks_of(text):
    """[(line number, language, option, [lines])] of the page's fenced blocks, in order."""
    out, current = [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if current is None and m and m.group(1):
            current = (number, m.group(1), m.group(2), [])
        elif current is None and line.startswith("```"):
            current = (number, "", "", [])
        elif current is not None and line.strip() == "```":
            out.append(current)
            current = None
        elif current is not None:
            current[3].append(line)
    return out


def runnable(text):
    """The ```bash blocks that run: [(line number, lines, [expected texts])]."""
    out = []
    for number, lang, option, lines in blocks_of(text):
        if lang != "bash" or option == "norun":
            continue
        expects = [m.group(1) for m in (EXPECT.match(l) for l in lines) if m]
        out.append((number, lines, expects))
    return out


def squash(s):
    return " ".join(s.split())


def first_command(lines):
    for l in lines:
        if l.strip() and not l.strip().startswith("#"):
            return l.strip()
    return "(empty)"


def prepare(work, source, shared):
    root = os.path.join(work, "root")
    os.makedirs(root)
    for name in ("configs", "scripts", "tests"):
        os.symlink(os.path.join(source, name), os.path.join(root, name))
    if shared:  # the shared data folder, where the pages read it: ../shared/data
        os.makedirs(os.path.join(work, "shared"))
        os.symlink(os.path.abspath(shared), os.path.join(work, "shared", "data"))
    return root


def run_page(page, trainer, source, shared, python, keep=False, show=False):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    blocks = runnable(text)
    name = os.path.relpath(page, source) if source else page
    if not blocks:
        print(f"{name}: no ```bash block to run")
        return 1
    script_text = "\n".join("\n".join(lines) for _, lines, _ in blocks)
    if "../shared/" in script_text and not shared:
        print(f"{name}: skipped: the page reads ../shared/data and there is no shared data folder (--shared DIR)")
        return SKIPPED
    if re.search(r"\bpython3?\b", script_text) and not python:
        print(f"{name}: skipped: the page runs python3 and there is no test venv (--python; scripts/setup.sh makes it)")
        return SKIPPED
    work = tempfile.mkdtemp(prefix="u3d-tutorial-")
    root = prepare(work, source, shared)
    env = dict(os.environ)
    path = [os.path.dirname(os.path.abspath(trainer))]
    if python:
        path.insert(0, os.path.dirname(python))  # a venv's bin/: its python3 finds the venv's packages
    if os.path.basename(trainer) != "trainer":
        raise SystemExit(f"--trainer {trainer}: the executable must be named trainer")
    env["PATH"] = os.pathsep.join(path + [env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "2")
    failures = 0
    start = time.time()
    try:
        for index, (number, lines, expects) in enumerate(blocks, 1):
            script = "\n".join(lines) + "\n"
            t0 = time.time()
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            where = f"{name}: block {index} (line {number}: {first_command(lines)})"
            output = proc.stdout
            missing = [e for e in expects if squash(e) not in squash(output)]
            if proc.returncode != 0 or missing:
                failures += 1
                if proc.returncode != 0:
                    print(f"{where}: exited {proc.returncode}")
                for e in missing:
                    print(f"{where}: the documented output line is missing: {e}")
                tail = output.splitlines()[-25:]
                print("  last output lines:\n    " + "\n    ".join(tail))
                break
            print(f"{where}: ok in {time.time() - t0:.1f} s ({len(expects)} documented line(s) found)")
            if show:
                print("    " + "\n    ".join(output.splitlines()))
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        return 1
    print(f"{name}: every block ran and printed what the page documents, in {time.time() - start:.1f} s")
    return 0


def self_check():
    """The runner fails on a failing command and on a missing line, and passes a good page."""
    good = "# t\n\n```bash\necho hello world\n# expect: hello   world\n```\n\n```bash norun\nfalse\n```\n" \
           "```text\nhello world\n```\n```bash\ntest -d configs && echo linked\n# expect: linked\n```\n"
    failing = "```bash\necho one\nfalse\necho two\n```\n"
    missing = "```bash\necho something else\n# expect: hello\n```\n"
    results = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        for sub in ("configs", "scripts", "tests"):
            os.makedirs(os.path.join(src, sub))
        fake_trainer = os.path.join(d, "bin", "trainer")
        os.makedirs(os.path.dirname(fake_trainer))
        with open(fake_trainer, "w") as f:
            f.write("#!/bin/sh\necho trainer\n")
        os.chmod(fake_trainer, 0o755)
        for label, text, want in (("good", good, 0), ("failing", failing, 1), ("missing", missing, 1)):
            page = os.path.join(d, label + ".md")
            with open(page, "w") as f:
                f.write(text)
            got = run_page(page, fake_trainer, src, None, None)
            results.append((label, got, want))
    wrong = [r for r in results if r[1] != r[2]]
    for label, got, want in wrong:
        print(f"self-check: page '{label}' gave exit {got}, expected {want}")
    if wrong:
        return 1
    print("tutorial runner self-check: a good page passes, a failing command and a missing line fail")
    return 0


def main(argv):
    if argv[1:] == ["--self-check"]:
        return self_check()
    args = {"--trainer": None, "--source": None, "--shared": None, "--python": None}
    keep = show = False
    pages = []
    i = 1
    while i < len(argv):
        if argv[i] in args and i + 1 < len(argv):
            args[argv[i]] = argv[i + 1]
            i += 2
        elif argv[i] == "--keep":
            keep = True
            i += 1
        elif argv[i] == "--show":
            show = True
            i += 1
        else:
            pages.append(argv[i])
            i += 1
    if not args["--trainer"] or not args["--source"] or not pages:
        print(__doc__)
        return 2
    python = args["--python"] or None
    if python and not os.path.exists(python):
        python = None
    shared = args["--shared"] if args["--shared"] and os.path.isdir(args["--shared"]) else None
    results = [run_page(os.path.abspath(page), os.path.abspath(args["--trainer"]),
                        os.path.abspath(args["--source"]), shared, python, keep, show) for page in pages]
    return 1 if 1 in results else (SKIPPED if SKIPPED in results else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
