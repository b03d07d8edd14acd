#!/usr/bin/env bash
# ctest gpu_check.arguments (label fault): scripts/gpu-check.sh and scripts/bench/workflows.sh refuse
# every unusable argument with one line naming it and exit 2, before anything is written: a deadline
# of 0, -5, abc or nan; a report path that is a file, under a file, or in a folder nobody can write
# (/proc); a report folder holding other files; --report and --work the same folder or one inside the
# other. No traceback, no report folder made. The same for the benchmark scripts' arguments
# (slices.sh, plan_vs_recipe.sh, compare.py, conv_floor.py: counts of 0, -5 or abc, a missing value
# or file).
#   tests/bundle/gpu_check_args_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-gpu-check-args-XXXXXX")"
trap 'rm -rf "$T"' EXIT
export U3D_BUILD_DIR="$BUILD"
failures=0
touch "$T/a-file"
mkdir -p "$T/full" && echo x > "$T/full/notes.txt"
expect() {  # expect NEEDLE ARGS...: exit 2, one line, naming NEEDLE, no traceback, no report made
  local needle="$1"; shift
  for script in "$SRC/scripts/gpu-check.sh" "$SRC/scripts/bench/workflows.sh"; do
    out="$("$script" "$@" 2>&1)"; rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ "$rc" != 2 ] || [ "$lines" != 1 ] || ! grep -qF -- "$needle" <<<"$out" || grep -q Traceback <<<"$out"; then
      echo "FAIL: $(basename "$script") $*: exit $rc, $lines line(s), expected 2 and one line naming '$needle':"
      echo "$out" | head -n 5
      failures=$((failures + 1))
    fi
  done
  [ ! -e "$T/new-report" ] || { echo "FAIL: $*: a report folder was made"; failures=$((failures + 1)); rm -rf "$T/new-report"; }
}
expect "--deadline 0" --deadline 0 --report "$T/new-report"
expect "--deadline -5" --deadline -5 --report "$T/new-report"
expect "--deadline: invalid float value: 'abc'" --deadline abc --report "$T/new-report"
expect "--deadline nan" --deadline nan --report "$T/new-report"
expect "--minutes 0" --minutes 0 --report "$T/new-report"
expect "--report $T/a-file: a file, not a folder" --report "$T/a-file"
expect "--report $T/a-file/r: $T/a-file is a file" --report "$T/a-file/r"
expect "--report /proc/u3d-report: cannot write in /proc" --report /proc/u3d-report
expect "holds notes.txt; give an empty or new folder" --report "$T/full" --work "$T/w"
expect "must be apart" --report "$T/new-report" --work "$T/new-report"
expect "must be apart" --report "$T/new-report" --work "$T/new-report/work"
expect "must be apart" --report "$T/w2/new-report" --work "$T/w2"
expect "--work $T/a-file: a file, not a folder" --report "$T/new-report" --work "$T/a-file"
[ -z "$(ls -A "$T/full" | grep -v notes.txt)" ] || { echo "FAIL: the full report folder was written"; failures=$((failures + 1)); }

# The benchmark scripts (issue 54's hostile pass): slices.sh and plan_vs_recipe.sh refuse before they
# make a scratch folder or a plan; conv_floor.py (pytorch_step.py's parser, shared by profile_step.py
# and torch_side.py) before it imports a network, when a Python with torch is at hand.
expect_one() {  # expect_one NEEDLE COMMAND...: exit 2, one line naming NEEDLE, no traceback
  local needle="$1"; shift
  out="$(cd "$T/cwd" && "$@" 2>&1)"; rc=$?
  lines=$(printf '%s\n' "$out" | grep -c .)
  if [ "$rc" != 2 ] || [ "$lines" != 1 ] || ! grep -qF -- "$needle" <<<"$out" || grep -q Traceback <<<"$out"; then
    echo "FAIL: $*: exit $rc, $lines line(s), expected 2 and one line naming '$needle':"
    echo "$out" | head -n 5
    failures=$((failures + 1))
  fi
}
mkdir -p "$T/cwd" && touch "$T/empty.h5"
slices="$SRC/scripts/bench/slices.sh"
expect_one "--cases 0: expected a positive whole number" "$slices" --cases 0
expect_one "--epochs -5: expected a positive whole number" "$slices" --epochs -5
expect_one "--batches abc: expected a positive whole number" "$slices" --batches "16 abc"
expect_one "--cases: expected a value" "$slices" --cases
expect_one "--device tpu: expected cuda or cpu" "$slices" --device tpu
expect_one "--trainer $T/a-file: not an executable" "$slices" --trainer "$T/a-file"
recipe="$SRC/scripts/bench/plan_vs_recipe.sh"
expect_one "MINUTES 0: expected a positive number" "$recipe" "$T/empty.h5" 32 0 t
expect_one "MINUTES -5: expected a positive number" "$recipe" "$T/empty.h5" 32 -5 t
expect_one "MINUTES abc: expected a positive number" "$recipe" "$T/empty.h5" 32 abc t
expect_one "DATA.h5 $T/none.h5: no such dataset file" "$recipe" "$T/none.h5" 32 5 t
expect_one "TAG ../t: expected letters" "$recipe" "$T/empty.h5" 32 5 ../t
expect_one "expected DATA.h5 PATCH MINUTES TAG" "$recipe" "$T/empty.h5" 32
compare=(python3 "$SRC/scripts/bench/compare.py" --trainer "$BUILD/trainer")
expect_one "--steps 0: expected a whole number >= 1" "${compare[@]}" --steps 0
expect_one "--filters -5: expected a whole number >= 1" "${compare[@]}" --filters -5
expect_one "--variants jit: expected eager and/or compile" "${compare[@]}" --variants jit
[ -z "$(ls -A "$T/cwd")" ] || { echo "FAIL: a refused benchmark wrote $(ls -A "$T/cwd")"; failures=$((failures + 1)); }
PY="${U3D_TORCH_PYTHON:-python3}"
if "$PY" -c "import torch" 2>/dev/null; then
  floor=("$PY" "$SRC/scripts/bench/conv_floor.py" --device cpu)
  expect_one "--steps 0: expected a whole number >= 1" "${floor[@]}" --steps 0
  expect_one "--warmup -5: expected a whole number >= 0" "${floor[@]}" --warmup -5
  expect_one "--size abc: expected a positive whole number" "${floor[@]}" --size abc
  expect_one "--device tpu: expected cpu, cuda" "$PY" "$SRC/scripts/bench/conv_floor.py" --device tpu
else
  echo "conv_floor.py: not checked (no torch in $PY; U3D_TORCH_PYTHON names the venv's)"
fi
if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "PASS"
