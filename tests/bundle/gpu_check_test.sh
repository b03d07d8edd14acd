#!/usr/bin/env bash
# ctest gpu_check.quick (label integration): scripts/gpu-check.sh --quick on this build tree writes
# gpu-report.md and gpu-report.json with the date, commit and machine; without CUDA every GPU section
# is SKIPPED with a reason and no CPU part FAILs; with CUDA nothing FAILs.
#   tests/bundle/gpu_check_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
PY="${2:-python3}"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-gpu-check-test-XXXXXX")"
trap 'rm -rf "$T"' EXIT
rc=0
U3D_BUILD_DIR="$BUILD" U3D_PYTHON="$PY" "$SRC/scripts/gpu-check.sh" --quick --out "$T/r" || rc=$?
[ -s "$T/r/gpu-report.md" ] || { echo "FAIL: no gpu-report.md"; exit 1; }
[ -s "$T/r/gpu-report.json" ] || { echo "FAIL: no gpu-report.json"; exit 1; }
cat "$T/r/gpu-report.md"
"$PY" - "$T/r/gpu-report.json" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
errors = []
for k in ("date", "commit", "machine"):
    if not r.get(k):
        errors.append(f"no {k}")
if r["commit"] == "unknown":
    errors.append("commit unknown")
ids = [s["id"] for s in r["sections"]]
if len(ids) != 8:
    errors.append(f"8 sections expected, got {ids}")
for s in r["sections"]:
    if s["cpu_status"] == "FAIL":
        errors.append(f"{s['id']}: CPU part FAIL: {s['cpu_reason']}")
    if not r["cuda"]:
        if s["status"] != "SKIPPED" or not s["reason"]:
            errors.append(f"{s['id']}: GPU part {s['status']} without CUDA (expected SKIPPED with a reason)")
    elif s["status"] == "FAIL":
        errors.append(f"{s['id']}: FAIL: {s['reason']}")
if r["overall"] != "PASS" or rc != 0:
    errors.append(f"overall {r['overall']}, exit {rc}")
if errors:
    sys.exit("FAIL: " + "; ".join(errors))
print(f"PASS ({r['seconds']} s)")
PY
