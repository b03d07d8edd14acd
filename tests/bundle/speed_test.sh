#!/usr/bin/env bash
# scripts/bench/speed.sh (issue 53), on a machine without a GPU, in seconds:
#   plan       ctest speed.plan (label integration): `--plan --deadline 540 --part 1` and `--part 2` exit 0
#              and plan the kernels' GPU tests and their networks (part 1: OpenKBP, MLPerf; part 2:
#              nnU-Net-like, 2D slices) whole
#              within 540 s of the H100 estimates; the plan runs nothing (a TRAINER that leaves a mark
#              is never started, no report folder is made); `--deadline 5` says it is too short to
#              start anything.
#   arguments  ctest speed.arguments (label fault): a missing --report or --deadline, a deadline of 0,
#              -5 or abc, a flag without its value, an unknown part or flag, a second TRAINER or one
#              that is not an executable, a report path that is a file: one line naming the flag,
#              exit 2, no traceback, no report folder made.
#   tests/bundle/speed_test.sh plan|arguments
set -uo pipefail
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder speed-test
speed="$SRC/scripts/bench/speed.sh"
printf '#!/bin/sh\ntouch "%s/trainer-ran"\n' "$T" > "$T/trainer" && chmod +x "$T/trainer"
failures=0
bad() { echo "FAIL: $*"; failures=$((failures + 1)); }

if [ "$1" = plan ]; then
  for part in 1 2; do
    out="$("$speed" --plan --deadline 540 --part "$part" --report "$T/r$part" "$T/trainer" 2> "$T/plan$part.txt")"
    rc=$?
    cat "$T/plan$part.txt"
    [ "$rc" = 0 ] || bad "--part $part: exit $rc"
    printf '%s\n' "$out" | python3 -c '
import json, sys
part, want = sys.argv[1], {"1": ["machine", "kernels", "openkbp", "mlperf"],
                           "2": ["machine", "kernels", "nnunet", "slices"]}[sys.argv[1]]
plan = json.loads(sys.stdin.read().strip().splitlines()[-1])
ids = [r["id"] for r in plan["sections"]]
problems = []
if plan["plan"] != "speed.sh" or plan["deadline_s"] != 540:
    problems.append(f"not the speed plan at 540 s: {plan['plan']}, {plan['deadline_s']}")
if ids != want:
    problems.append(f"sections {ids}, expected {want}")
if not 0 < plan["total_s"] <= 540:
    problems.append(f"total {plan['total_s']} s, expected at most 540")
for r in plan["sections"]:
    if not r["starts"] or r["planned_s"] != r["estimate_s"]:
        problems.append("section {} does not run whole: planned {} of {} s".format(r["id"], r.get("planned_s"), r["estimate_s"]))
if plan["starts_nothing"]:
    problems.append("starts_nothing at 540 s")
for p in problems:
    print(f"FAIL: --part {part}: {p}")
sys.exit(1 if problems else 0)' "$part" || failures=$((failures + 1))
    grep -q "planned .* of 540 s" "$T/plan$part.txt" || bad "--part $part: no 'planned ... of 540 s' line"
  done
  out="$("$speed" --plan --deadline 5 --part 1 2> "$T/short.txt")"; rc=$?
  [ "$rc" = 0 ] || bad "--deadline 5: exit $rc"
  grep -q "too short to start anything" "$T/short.txt" || { cat "$T/short.txt"; bad "--deadline 5: not said too short"; }
  printf '%s\n' "$out" | grep -q '"starts_nothing": true' || bad "--deadline 5: starts_nothing is not true"
  [ ! -e "$T/trainer-ran" ] || bad "--plan started the trainer"
  [ -z "$(ls -d "$T"/r* 2>/dev/null)" ] || bad "--plan made a report folder"
elif [ "$1" = arguments ]; then
  mkdir -p "$T/cwd"
  touch "$T/a-file"
  expect() {  # expect NEEDLE ARGS...: exit 2, one line naming NEEDLE, no traceback, nothing made
    local needle="$1"; shift
    out="$(cd "$T/cwd" && "$speed" "$@" 2>&1)"; rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ "$rc" != 2 ] || [ "$lines" != 1 ] || ! grep -qF -- "$needle" <<<"$out" || grep -q Traceback <<<"$out"; then
      bad "speed.sh $*: exit $rc, $lines line(s), expected 2 and one line naming '$needle':"
      echo "$out" | head -n 5
    fi
    [ ! -e "$T/r" ] || { bad "speed.sh $*: a report folder was made"; rm -rf "$T/r"; }
  }
  expect "speed.sh: --report: expected the report folder" --deadline 540
  expect "speed.sh: --report: expected the report folder" --deadline 540 --part 1 "$T/trainer"
  expect "speed.sh: --deadline: expected the seconds" --report "$T/r"
  expect "speed.sh: --deadline -5: expected a positive number" --deadline -5 --report "$T/r"
  expect "speed.sh: --deadline 0: expected a positive number" --deadline 0 --report "$T/r"
  expect "speed.sh: --deadline abc: expected a positive number" --deadline abc --report "$T/r"
  expect "speed.sh: --deadline -5: expected a positive number" --plan --deadline -5
  expect "speed.sh: --deadline: expected a value" --report "$T/r" --deadline
  expect "speed.sh: --part 3: expected 1, 2 or all" --deadline 540 --report "$T/r" --part 3
  expect "speed.sh: --part: expected a value" --deadline 540 --report "$T/r" --part
  expect "speed.sh: unknown argument --frobnicate" --deadline 540 --report "$T/r" --frobnicate
  expect "speed.sh: unknown argument --only" --deadline 540 --report "$T/r" --only 1
  expect "speed.sh: TRAINER $T/a-file: not an executable" --deadline 540 --report "$T/r" "$T/a-file"
  expect "speed.sh: $T/trainer: a second TRAINER" --deadline 540 --report "$T/r" "$T/trainer" "$T/trainer"
  expect "speed.sh: --report $T/a-file: a file, not a folder" --deadline 540 --report "$T/a-file"
  [ -z "$(ls -A "$T/cwd")" ] || bad "a refused run wrote $(ls -A "$T/cwd")"
  [ ! -e "$T/trainer-ran" ] || bad "a refused run started the trainer"
else
  fail "usage: speed_test.sh plan|arguments"
fi
if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "PASS"
