#!/usr/bin/env bash
# The speed report of issue 53 on one GPU box, from the release bundle or a build tree, inside a hard
# deadline: gpu-check's loop, deadline and report (scripts/bench/gpu_check.py --suite speed, sections
# in scripts/bench/gpucheck/sections_speed.py). The report starts with the machine (GPU, H100 or
# H200, driver, torch, the trainer's commit); then our kernels' GPU tests, per family (passed on
# this GPU's architecture or not); then per network and batch: the trainer with the CUDA
# graph and model.fused_kernels=on (and one --benchmark --profile breakdown of that step), PyTorch
# torch.compile and eager of the same network (pytorch_step.py), the trainer with
# model.fused_kernels=off, the convolution floor (conv_floor.py) and its share of the step; each
# row beside NVIDIA's MLPerf figure for the GPU and the goals. It ends with a table to paste into
# docs/performance.md (date, GPU, commit, command).
#   part 1: the kernels' tests, OpenKBP baseline (batch 2), MLPerf 3D U-Net (batch 2 and its best of 2, 4, 7, 8)
#   part 2: the kernels' tests, nnU-Net-like U-Net (batch 2), the 2D slice recipe (batch 16 and 128)
# torch.compile costs about 100 s per network: each part is planned within 540 s of the H100
# estimates (scripts/bench/gpucheck/estimates.py); --part all runs both in one deadline.
#
#   scripts/bench/speed.sh --deadline SECONDS --report DIR [--plan] [--part 1|2|all] [--work DIR]
#                          [--python PY] [TRAINER]
# --plan: each section's estimate and whether it starts within --deadline; runs nothing (works
# without a GPU). DIR gets gpu-report.md, gpu-report.json and logs.tar.gz, rewritten after every
# command, so a killed run leaves a readable report. TRAINER: default the bundle's bin/trainer or
# build/release/trainer. Exit 0: nothing failed; 1: a section FAILed; 2: bad arguments (one line).
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
root="$(cd "$here/../.." && pwd)"
usage() { echo "speed.sh: $*" >&2; exit 2; }  # a bad argument: one line naming it, exit 2, nothing made
deadline=""; report=""; part=all; plan=(); trainer=""; pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deadline|--report|--part|--work|--python) [ $# -ge 2 ] || usage "$1: expected a value" ;;
  esac
  case "$1" in
    --deadline) deadline="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    --part) part="$2"; shift 2 ;;
    --work|--python) pass+=("$1" "$2"); shift 2 ;;
    --plan) plan=(--plan); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) usage "unknown argument $1 (expected --deadline, --report, --part, --plan, --work, --python, TRAINER)" ;;
    *) [ -z "$trainer" ] || usage "$1: a second TRAINER (the first: $trainer)"; trainer="$1"; shift ;;
  esac
done
[ -n "$deadline" ] || usage "--deadline: expected the seconds the run may take (--deadline SECONDS)"
[[ "$deadline" =~ ^[0-9]*\.?[0-9]+$ ]] && awk "BEGIN { exit !($deadline > 0) }" \
  || usage "--deadline $deadline: expected a positive number of seconds"
case "$part" in 1|2|all) ;; *) usage "--part $part: expected 1, 2 or all" ;; esac
[ ${#plan[@]} -gt 0 ] || [ -n "$report" ] || usage "--report: expected the report folder (--report DIR)"
if [ -n "$trainer" ]; then
  [ -f "$trainer" ] && [ -x "$trainer" ] || usage "TRAINER $trainer: not an executable (scripts/build.sh release trainer)"
  pass+=(--trainer "$(readlink -f "$trainer")")
fi
[ -z "$report" ] || pass+=(--report "$report")
exec "$root/scripts/gpu-check.sh" --suite speed --part "$part" --deadline "$deadline" \
  ${plan[@]+"${plan[@]}"} ${pass[@]+"${pass[@]}"}
