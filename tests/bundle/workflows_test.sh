#!/usr/bin/env bash
# ctest workflows.rehearsal (label integration): the CPU rehearsal of scripts/bench/workflows.sh.
# 1. `--deadline 300` with the shared OpenKBP sample: every workflow (11 OpenKBP, 12 slices, 13 surface,
#    14 nnU-Net) is SKIPPED on the GPU without CUDA and its rehearsal PASSes: two tiny epochs, a score,
#    samples/s, the time to the first step, peak host memory, no GPU busy share; one table row each;
#    every log records its command's peak RSS; the report folder holds its three files only.
# 2. `--plan --deadline 480`: sections 1 and 11-14 all start on an H100 by their estimates.
# 3. A second run killed with SIGKILL while section 12 runs leaves a valid report (earlier sections
#    done, 12 running, the rest pending) and no process alive.
#   tests/bundle/workflows_test.sh BUILD_DIR SHARED_DATA_DIR [VENV_PYTHON]
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
SHARED="$2"
PY="${3:-python3}"
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder workflows-test
export U3D_BUILD_DIR="$BUILD" U3D_PYTHON="$PY"
sample="$SHARED/openkbp-sample.tar.xz"
has_sample=1
[ -f "$sample" ] || { echo "no $sample: section 11 is left out"; has_sample=0; }
okbp=(); [ "$has_sample" = 1 ] && okbp=(--openkbp "$sample")

echo "== 1. the rehearsal: --deadline 300"
rc=0
start=$(date +%s)
timeout 400 "$SRC/scripts/bench/workflows.sh" --deadline 300 --report "$T/r" --work "$T/w" "${okbp[@]}" || rc=$?
took=$(( $(date +%s) - start ))
[ -s "$T/r/gpu-report.md" ] || fail "no gpu-report.md"
sed -n '/^## Workflows/,/^$/p' "$T/r/gpu-report.md"
python3 "$SRC/tests/bundle/workflows_report.py" rehearsal "$T/r" "$rc" "$took" 300 "$has_sample" \
  || { tail -n 40 "$T/r/gpu-report.md"; fail "the rehearsal's report"; }

echo "== 2. the plan: --plan --deadline 480"
"$SRC/scripts/bench/workflows.sh" --plan --deadline 480 --openkbp "$SRC" > "$T/plan.json" 2> "$T/plan.txt" \
  || fail "--plan exit $?"
cat "$T/plan.txt"
python3 "$SRC/tests/bundle/workflows_report.py" plan "$T/plan.json" || fail "the plan"

echo "== 3. SIGKILL while section 12 (2D slices) runs"
kill_during 12 120 "$T/k" "$T/wk" "$T/k.log" \
  "$SRC/scripts/bench/workflows.sh" --deadline 300 --report "$T/k" --work "$T/wk" --only 1,slices
python3 "$SRC/tests/bundle/workflows_report.py" killed "$T/k" 12 || fail "the killed run's report"
echo "PASS (rehearsal ${took} s)"
