#!/usr/bin/env bash
# ctest gpu_check.rehearsal (label integration): the CPU rehearsal of scripts/gpu-check.sh.
# 1. `--deadline 60` on this build tree finishes inside the deadline and leaves a report folder of
#    at most 8 plain files (gpu-report.md, gpu-report.json, logs.tar.gz), none over 16 MiB, no
#    sub-folder; the JSON has the date, commit, machine and every section with its estimate and
#    measured time; without CUDA every GPU section is SKIPPED with a reason (never PASS) and no CPU
#    rehearsal FAILs; the archive holds each command's log.
# 2. `--plan --deadline 500`: sections 1-4 are estimated at 300 s or less on an H100 and all start.
# 3. A second run killed with SIGKILL while section 4 runs leaves a valid report of the sections
#    finished before it (state done), the running one marked running, the rest pending, the logs
#    of the finished commands, and no process of the check alive.
#   tests/bundle/gpu_check_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
PY="${2:-python3}"
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder gpu-check-test
export U3D_BUILD_DIR="$BUILD" U3D_PYTHON="$PY"

echo "== 1. the rehearsal: --deadline 60"
rc=0
start=$(date +%s)
timeout 120 "$SRC/scripts/gpu-check.sh" --deadline 60 --report "$T/r" --work "$T/w" || rc=$?
took=$(( $(date +%s) - start ))
[ -s "$T/r/gpu-report.md" ] || fail "no gpu-report.md"
cat "$T/r/gpu-report.md" | head -n 24
python3 "$SRC/tests/bundle/gpu_check_report.py" full "$T/r" "$rc" "$took" || fail "the rehearsal's report"

echo "== 2. the plan: --plan --deadline 500"
"$SRC/scripts/gpu-check.sh" --plan --deadline 500 > "$T/plan.json" 2> "$T/plan.txt" || fail "--plan exit $?"
cat "$T/plan.txt"
python3 "$SRC/tests/bundle/gpu_check_report.py" plan "$T/plan.json" || fail "the plan"

echo "== 3. SIGKILL while section 4 runs (a training run of the kill-and-resume rehearsal)"
kill_during 4 60 "$T/k" "$T/wk" "$T/k.log" "$SRC/scripts/gpu-check.sh" --deadline 60 --report "$T/k" --work "$T/wk"
python3 "$SRC/tests/bundle/gpu_check_report.py" killed "$T/k" 4 || fail "the killed check's report"
echo "PASS (rehearsal ${took} s)"
