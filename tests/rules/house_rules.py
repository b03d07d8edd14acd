#!/usr/bin/env python3
"""The house rules of CONTRIBUTING.md, checked on the source tree (ctest `house_rules`, label unit).

  house_rules.py SOURCE_DIR      lists every breach, one a line, and exits 1 when there is one
  house_rules.py --self-check    checks the checker on a small forged tree (ctest `house_rules.self_check`)

The rules:
  - no file in src/ or include/ over 500 lines;
  - a file in src/<room>/ or include/u3d/<room>/ includes "u3d/<other>/..." only for the rooms
    ROOMS allows it (src/main.cpp counts as app); src/app/predict_command.cpp and
    src/app/export_command.cpp include no u3d/train/ header;
  - a header private to a folder (a .h in src/<room>/) is included only from that folder, as
    "<name>.h", and what it names exists there; include/ and tests/ include no source-private header;
  - no include loop inside a room: the "..." includes among the files of src/<room>/ and
    include/u3d/<room>/ form no cycle (one line per loop, with its files);
  - every .cpp/.h of src/, include/ and tests/ is as clang-format writes it (`clang-format --dry-run
    --Werror`, one call; skipped with a note when clang-format is not on PATH);
  - no import circle among the Python modules of scripts/ (in one folder or across folders: `import x`
    of a module beside the file or, through sys.path, elsewhere in scripts/; `from .x import`);
  - README.md is a front page of at most 250 lines, src/main.cpp a parser and dispatcher of at most 150;
  - the Layout block (docs/layout.md, and README.md's "## Layout" when it has one) names only files that
    exist: a room row lists concepts of include/u3d/<room>/, every public header is listed in its room's
    row, and every other name with a "." or a trailing "/" exists below its row's folder.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cycles import cycles, files_under, read_lines  # noqa: E402  (beside this file)
from python_imports import check_python_imports  # noqa: E402

MAX_LINES = 500
MAX_README_LINES = 250  # the front page (issue 52): what it is, install, a first run, where to read on
MAX_MAIN_LINES = 150  # src/main.cpp parses and dispatches; a command's options live in its src/cli_*.cpp

# The room include table of CONTRIBUTING.md: a room includes only these rooms' headers.
ROOMS = {
    "core": {"core"},
    "io": {"core", "io"},
    "data": {"core", "io", "data"},
    "kernels": {"core", "kernels"},
    "model": {"core", "io", "data", "kernels", "model"},
    "monitor": {"core", "io", "monitor"},
    "evaluate": {"core", "io", "data", "model", "evaluate"},
    "predict": {"core", "io", "data", "model", "monitor", "evaluate", "predict"},
    "plan": {"core", "io", "data", "model", "evaluate", "plan"},
    "train": {"core", "io", "data", "kernels", "model", "monitor", "evaluate", "predict", "train"},
}
ROOM_ORDER = ["core", "io", "data", "kernels", "model", "monitor", "evaluate", "predict", "plan", "train", "app"]
# io/ is split by format (CONTRIBUTING.md): a format's folder includes only these folders of io/
# ("" is io/ itself: the importers' shared options and steps, the phantoms); io/ itself includes any.
IO_ROOMS = {
    "h5": {"h5"},
    "nifti": {"h5", "nifti"},
    "tiff": {"", "h5", "nifti", "tiff"},
    "images": {"", "h5", "nifti", "tiff", "images"},
    "dicom": {"", "h5", "dicom"},
    "openkbp": {"", "h5", "openkbp"},
}
IO_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]u3d/io/(?:([a-z0-9_]+)/)?[a-z0-9_]+\.h[">]')
# Files held to a narrower rule than their room's: path -> rooms they may not include.
NARROWER = {
    "src/app/predict_command.cpp": {"train"},
    "src/app/export_command.cpp": {"train"},
}

PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]u3d/([^/">]+)/')
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".c")


def room_of(path):
    """The room of a src/ or include/ file ("app" for src/main.cpp), or None outside the rooms."""
    parts = path.split("/")
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "app"
    if parts[:2] == ["include", "u3d"] and len(parts) > 3:
        return parts[2]
    return None


def io_room_of(path):
    """The folder of io/ a src/io/ or include/u3d/io/ file is in ("" for io/ itself), or None."""
    parts = path.split("/")
    if parts[:2] == ["src", "io"]:
        return parts[2] if len(parts) > 3 else ""
    if parts[:3] == ["include", "u3d", "io"]:
        return parts[3] if len(parts) > 4 else ""
    return None


def allowed_text(room):
    return ", ".join(r for r in ROOM_ORDER if r in ROOMS[room])


def check(root, known_loops=None):
    """Every breach of the rules in the tree at root, one line each, in file order."""
    findings = []
    sources = files_under(root, "src") + files_under(root, "include")
    private = {p for p in files_under(root, "src") if p.endswith(".h") and p.count("/") >= 2}
    private_names = {p.rsplit("/", 1)[1]: p for p in private}
    for path in sources:
        lines = read_lines(root, path)
        if len(lines) > MAX_LINES:
            findings.append(f"{path}: {len(lines)} lines, over the {MAX_LINES}-line limit (split it along a concept)")
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        room = room_of(path)
        io_room = io_room_of(path)
        if io_room and io_room not in IO_ROOMS:
            findings.append(f"{path}: io/{io_room}/ is not in io's table of formats (IO_ROOMS, CONTRIBUTING.md)")
            io_room = None
        if room is not None and room != "app" and room not in ROOMS:
            findings.append(f"{path}: room '{room}' is not in the room include table (tests/rules/house_rules.py, CONTRIBUTING.md)")
            room = None
        for number, line in enumerate(lines, 1):
            m = PROJECT_INCLUDE.match(line)
            if m:
                other = m.group(1)
                if room in ROOMS and other not in ROOMS[room]:
                    findings.append(f"{path}:{number}: {room} may not include u3d/{other}/ "
                                    f"(it may include {allowed_text(room)})")
                elif other in NARROWER.get(path, ()):
                    findings.append(f"{path}:{number}: {path.rsplit('/', 1)[1]} may not include u3d/{other}/")
                io = IO_INCLUDE.match(line)
                if io and io_room and (io.group(1) or "") not in IO_ROOMS[io_room]:
                    target = f"io/{io.group(1)}/" if io.group(1) else "io/ itself"
                    findings.append(f"{path}:{number}: io/{io_room}/ may not include {target} (it may include "
                                    f"{', '.join('io/' + (r + '/' if r else '') for r in sorted(IO_ROOMS[io_room]))})")
                continue
            m = LOCAL_INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            if path.startswith("include/"):
                findings.append(f'{path}:{number}: a public header includes "{name}": only "u3d/<room>/<name>.h" '
                                "(a source-private header stays beside its sources)")
            elif (name.startswith("../") and "/" not in name[3:] and path.count("/") >= 3
                  and os.path.normpath(os.path.join(os.path.dirname(path), name)) in private):
                pass  # a room's private header, from a folder of that room (io/<format>/ -> io/import_layout.h)
            elif "/" in name:
                findings.append(f'{path}:{number}: includes "{name}": a source-private header is included from '
                                "its own folder as \"<name>.h\", never across folders")
            elif os.path.dirname(path) + "/" + name not in private and name in private_names:
                findings.append(f'{path}:{number}: includes "{name}", private to {os.path.dirname(private_names[name])}/')
    for path in files_under(root, "tests"):
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        for number, line in enumerate(read_lines(root, path), 1):
            m = LOCAL_INCLUDE.match(line)
            if m and "src/" in m.group(1):
                findings.append(f'{path}:{number}: includes "{m.group(1)}", a source-private header')
    main_cpp = os.path.join(root, "src", "main.cpp")
    if os.path.isfile(main_cpp) and len(read_lines(root, "src/main.cpp")) > MAX_MAIN_LINES:
        findings.append(f"src/main.cpp: {len(read_lines(root, 'src/main.cpp'))} lines, over main's {MAX_MAIN_LINES} "
                        "(declare a command's options in its src/cli_*.cpp)")
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme) and len(read_lines(root, "README.md")) > MAX_README_LINES:
        findings.append(f"README.md: {len(read_lines(root, 'README.md'))} lines, over the front page's "
                        f"{MAX_README_LINES} (move the section into a page of docs/)")
    findings += check_include_loops(root, sources, KNOWN_LOOPS if known_loops is None else known_loops)
    findings += check_layout(root)
    findings += check_python_imports(root)
    findings += check_format(root)
    return findings


def concept_of(path):
    """A file's concept: its room and name without the suffix (a header and its .cpp are one)."""
    return f"{room_of(path)}/{os.path.splitext(path.rsplit('/', 1)[1])[0]}"


# Include loops allowed as debt: a listed loop is allowed until it is broken, a loop not listed is a
# breach, and a listed loop that is gone must leave the list. Empty since issue 52 broke the five found
# when the check came.
KNOWN_LOOPS = []


def check_include_loops(root, sources, known=()):
    """Include loops inside a room: the concepts of src/<room>/ and include/u3d/<room>/ (a header and
    the .cpp of its name are one concept) with an edge for each "..." include of a file of one into a
    header of another, the room's own "u3d/<room>/x.h" or a private "x.h" beside the file. One line per
    strongly connected set, with its shortest loop from its first concept and the includes that make it."""
    findings = []
    existing = set(sources)
    edges, why = {}, {}
    for path in sources:
        room = room_of(path)
        if room is None or not path.endswith(SOURCE_SUFFIXES):
            continue
        here = concept_of(path)
        edges.setdefault(here, set())
        for line in read_lines(root, path):
            m = LOCAL_INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            if name.startswith(f"u3d/{room}/"):
                target = "include/" + name
            elif "/" not in name and path.startswith("src/"):
                target = os.path.dirname(path) + "/" + name
            else:
                continue
            there = concept_of(target)
            if target in existing and there != here:
                edges[here].add(there)
                why.setdefault((here, there), f"{path} includes {target}")
    edges = {k: sorted(v) for k, v in edges.items()}
    seen = []
    for comp, loop in cycles(sorted(edges), edges):
        seen.append(set(comp))
        if set(comp) in known:
            continue
        room = comp[0].split("/", 1)[0]
        names = [c.split("/", 1)[1] for c in loop]
        steps = "; ".join(why[(x, y)] for x, y in zip(loop, loop[1:]))
        rest = f" (loop set of {len(comp)}: {', '.join(c.split('/', 1)[1] for c in comp)})" \
            if len(comp) > len(loop) - 1 else ""
        findings.append(f"{room}/: include loop {' -> '.join(names)}{rest}: {steps} (break it with a forward "
                        "declaration, or move the include from the header to its .cpp)")
    for loop in known:
        if loop not in seen:
            findings.append(f"tests/rules/house_rules.py: KNOWN_LOOPS lists {', '.join(sorted(loop))}, which no "
                            "longer include each other in a loop: take it off the list")
    return findings


FORMAT_TOPS = ["src", "include", "tests"]
FORMAT_SUFFIXES = (".cpp", ".h")


def check_format(root):
    """The .cpp/.h files under src/, include/ and tests/ that clang-format would change (one
    `clang-format --dry-run --Werror` call); nothing when clang-format is not on PATH (main() notes it)."""
    exe = shutil.which("clang-format")
    if exe is None:
        return []
    files = [p for top in FORMAT_TOPS for p in files_under(root, top) if p.endswith(FORMAT_SUFFIXES)]
    if not files:
        return []
    run = subprocess.run([exe, "--dry-run", "--Werror", *files], cwd=root, capture_output=True, text=True)
    if run.returncode == 0:
        return []
    drift = sorted({m.group(1) for m in re.finditer(r"^(\S+?):\d+:\d+: error:", run.stderr, re.M)})
    if not drift:
        return [f"clang-format --dry-run --Werror failed: {run.stderr.strip().splitlines()[:1]}"]
    return [f"{path}: not as clang-format writes it (clang-format -i {path}, or scripts/format.sh)" for path in drift]


LAYOUT_PAGES = ["docs/layout.md", "README.md"]
ROOM_ROW = re.compile(r"^  (\w+(?:/\w+)?)/\s+(.*)$")  # a room, or a folder of one (io/dicom/)
FOLDER_ROW = re.compile(r"^(\S+/)\s+(.*)$")


def layout_block(text):
    """The lines of the first ``` block after a "# Layout"/"## Layout" heading, or None."""
    head = re.search(r"^#{1,2} Layout\s*$", text, re.M)
    if not head:
        return None
    section = re.split(r"^#{1,6} ", text[head.end():], maxsplit=1, flags=re.M)[0]
    m = re.search(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M)
    return m.group(1).splitlines() if m else None


def check_layout(root):
    """Names in the Layout block(s) that do not exist, and public headers the block does not list."""
    findings = []
    seen_any = False
    for page in LAYOUT_PAGES:
        if not os.path.isfile(os.path.join(root, page)):
            continue
        block = layout_block(open(os.path.join(root, page), encoding="utf-8").read())
        if block is None:
            continue
        seen_any = True
        listed = {}
        room = base = None
        for line in block:
            if not line.strip():
                continue
            m = ROOM_ROW.match(line)
            if m and not line.startswith("   "):
                room, base = m.group(1), None
                names = m.group(2).rsplit(":", 1)[-1]
                listed.setdefault(room, set())
                if not os.path.isdir(os.path.join(root, "include", "u3d", room)):
                    findings.append(f"{page}: Layout lists the room {room}/, which include/u3d/ does not have")
            elif line.startswith("  "):
                names = line
            else:
                m = FOLDER_ROW.match(line)
                room = None
                base = m.group(1) if m else None
                if base and "<" in base:
                    base = None
                names = m.group(2) if m else ""
            names = re.sub(r"\([^)]*\)", " ", names)
            for name in re.split(r"[\s;,]+", names):
                if not name:
                    continue
                if room is not None:
                    if re.fullmatch(r"\w+", name):
                        listed[room].add(name)
                        if not os.path.isfile(os.path.join(root, "include", "u3d", room, name + ".h")):
                            findings.append(f"{page}: Layout lists {room}/{name}, but include/u3d/{room}/{name}.h "
                                            "does not exist")
                elif base and ("." in name or name.endswith("/")):
                    if not os.path.exists(os.path.join(root, base, name)):
                        findings.append(f"{page}: Layout lists {base}{name}, which does not exist")
        include_root = os.path.join(root, "include", "u3d")
        rooms = []  # every folder of include/u3d/ that holds headers: core, io, io/dicom, ...
        for folder, dirs, names in sorted(os.walk(include_root)) if os.path.isdir(include_root) else []:
            dirs.sort()
            if folder != include_root and (any(n.endswith(".h") for n in names) or not dirs):
                rooms.append(os.path.relpath(folder, include_root).replace(os.sep, "/"))
        for r in rooms:
            if r not in listed:
                findings.append(f"{page}: Layout has no row for the room {r}/ (include/u3d/{r}/)")
                continue
            for h in sorted(os.listdir(os.path.join(include_root, r))):
                if h.endswith(".h") and h[:-2] not in listed[r]:
                    findings.append(f"{page}: Layout's {r}/ row does not list {h[:-2]} (include/u3d/{r}/{h})")
    if not seen_any:
        findings.append("docs/layout.md: no \"# Layout\" heading followed by a ``` block naming the tree")
    return findings


def self_check():
    """The checker finds each kind of breach in a forged tree, and nothing in a clean one."""
    files = {
        "src/core/text.cpp": '#include "u3d/core/text.h"\n#include "u3d/core/files.h"\n',
        "src/core/ugly.cpp": "int  z ;\n",
        ".clang-format": "BasedOnStyle: Google\nColumnLimit: 120\nSortIncludes: Never\n",
        "src/core/long.cpp": "int x;\n" * (MAX_LINES + 1),
        "src/core/fits.cpp": "int y;\n" * MAX_LINES,
        "src/io/h5.cpp": '#include "u3d/core/files.h"\n#include "u3d/data/batch.h"\n',
        "include/u3d/plan/planner.h": '#pragma once\n#include "u3d/train/trainer.h"\n',
        "src/app/predict_command.cpp": '#include "u3d/predict/predictor.h"\n#include "u3d/train/amp.h"\n',
        "src/app/train_command.cpp": '#include "u3d/train/trainer.h"\n',
        "src/main.cpp": '#include "u3d/train/trainer.h"\n' + "int m;\n" * MAX_MAIN_LINES,
        "src/data/compact_case.h": "#pragma once\n",
        "src/data/cache.cpp": '#include "compact_case.h"\n',
        "src/io/dataset.cpp": '#include "compact_case.h"\n',
        "src/io/other.cpp": '#include "../data/compact_case.h"\n',
        "src/io/import_layout.h": "#pragma once\n",
        "src/io/nifti/reader.cpp": '#include "../import_layout.h"\n#include "u3d/io/h5/h5.h"\n'
                                   '#include "u3d/io/dicom/dicom.h"\n',
        "src/io/scroll/volume.cpp": "int z;\n",
        "include/u3d/data/cache.h": '#pragma once\n#include "compact_case.h"\n',
        "src/state/store.cpp": '#include "u3d/core/files.h"\n',
        "tests/unit/data/cache_test.cpp": '#include "test_support.h"\n#include "../../../src/data/compact_case.h"\n',
        "README.md": "line\n" * (MAX_README_LINES + 1),
        "include/u3d/core/text.h": "#pragma once\n",
        "include/u3d/core/files.h": '#pragma once\n#include "u3d/core/text.h"\n',
        "scripts/pkg/__init__.py": "",
        "scripts/pkg/a.py": "from .b import run\n",
        "scripts/pkg/b.py": "def f():\n    from .a import g\n",
        "scripts/pkg/c.py": "from .b import f\n",
        "scripts/tool.py": "import helper\n",
        "scripts/helper.py": "import json\n",
        "scripts/x/one.py": "import two\n",
        "scripts/y/two.py": "import json\nimport one\n",
        "docs/layout.md": "# Layout\n\n```\ninclude/u3d/<room>/<concept>.h   headers:\n"
                          "  core/     text gone\n  data/     cache\n  train/    trainer\n"
                          "  io/       formats: h5\nsrc/      core/ main.cpp (a note: cli.h) missing.cpp\n```\n",
    }
    expected = [
        "src/app/predict_command.cpp:2: predict_command.cpp may not include u3d/train/",
        "src/core/long.cpp: 501 lines, over the 500-line limit (split it along a concept)",
        "src/io/dataset.cpp:1: includes \"compact_case.h\", private to src/data/",
        "src/io/h5.cpp:2: io may not include u3d/data/ (it may include core, io)",
        "src/io/nifti/reader.cpp:3: io/nifti/ may not include io/dicom/ (it may include io/h5/, io/nifti/)",
        "src/io/other.cpp:1: includes \"../data/compact_case.h\": a source-private header is included from its "
        "own folder as \"<name>.h\", never across folders",
        "src/io/scroll/volume.cpp: io/scroll/ is not in io's table of formats (IO_ROOMS, CONTRIBUTING.md)",
        "src/state/store.cpp: room 'state' is not in the room include table (tests/rules/house_rules.py, CONTRIBUTING.md)",
        "include/u3d/data/cache.h:2: a public header includes \"compact_case.h\": only \"u3d/<room>/<name>.h\" "
        "(a source-private header stays beside its sources)",
        "include/u3d/plan/planner.h:2: plan may not include u3d/train/ (it may include core, io, data, model, evaluate, plan)",
        "tests/unit/data/cache_test.cpp:2: includes \"../../../src/data/compact_case.h\", a source-private header",
        "src/main.cpp: 151 lines, over main's 150 (declare a command's options in its src/cli_*.cpp)",
        "README.md: 251 lines, over the front page's 250 (move the section into a page of docs/)",
        "core/: include loop files -> text -> files: include/u3d/core/files.h includes include/u3d/core/text.h; "
        "src/core/text.cpp includes include/u3d/core/files.h (break it with a forward declaration, or move the "
        "include from the header to its .cpp)",
        "tests/rules/house_rules.py: KNOWN_LOOPS lists data/finalize, data/sampler, which no longer include each "
        "other in a loop: take it off the list",
        "docs/layout.md: Layout lists core/gone, but include/u3d/core/gone.h does not exist",
        "docs/layout.md: Layout lists the room train/, which include/u3d/ does not have",
        "docs/layout.md: Layout lists train/trainer, but include/u3d/train/trainer.h does not exist",
        "docs/layout.md: Layout lists the room io/, which include/u3d/ does not have",
        "docs/layout.md: Layout lists io/h5, but include/u3d/io/h5.h does not exist",
        "docs/layout.md: Layout lists src/missing.cpp, which does not exist",
        "docs/layout.md: Layout's core/ row does not list files (include/u3d/core/files.h)",
        "docs/layout.md: Layout has no row for the room plan/ (include/u3d/plan/)",
        "scripts: import circle scripts/pkg/a.py -> scripts/pkg/b.py -> scripts/pkg/a.py (move what both need "
        "into a module that imports neither)",
        "scripts: import circle scripts/x/one.py -> scripts/y/two.py -> scripts/x/one.py (move what both need into "
        "a module that imports neither)",
    ]
    if shutil.which("clang-format"):
        expected.append("src/core/ugly.cpp: not as clang-format writes it (clang-format -i src/core/ugly.cpp, or "
                        "scripts/format.sh)")
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found = check(root, known_loops=[{"data/sampler", "data/finalize"}])
    if found != expected:
        print("house_rules self-check: findings differ from the expected ones")
        print("found:\n  " + "\n  ".join(found))
        print("expected:\n  " + "\n  ".join(expected))
        return 1
    print(f"house_rules self-check: the {len(expected)} forged breaches found, nothing else"
          + ("" if shutil.which("clang-format") else " (clang-format not on PATH: its check not forged)"))
    return 0


def main(argv):
    if argv[1:] == ["--self-check"]:
        return self_check()
    if len(argv) != 2 or not os.path.isdir(os.path.join(argv[1], "src")):
        print(__doc__)
        return 2
    findings = check(argv[1])
    if not shutil.which("clang-format"):
        print("note: clang-format is not on PATH: the formatting of src/, include/ and tests/ was not checked")
    for line in findings:
        print(line)
    if findings:
        print(f"{len(findings)} breach(es) of the house rules (CONTRIBUTING.md)")
        return 1
    print("house rules hold: no file over 500 lines, every include within its room's table, no include loop in a "
          f"room{f' but the {len(KNOWN_LOOPS)} of KNOWN_LOOPS' if KNOWN_LOOPS else ''}, README.md within 250 lines, src/main.cpp within 150, the Layout names only files that exist, no import circle in scripts/, "
          "the C++ as clang-format writes it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
