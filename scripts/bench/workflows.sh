#!/usr/bin/env bash
# The users' workflows end to end on a GPU box, inside one short slot: gpu-check's sections 11-14
# (scripts/bench/gpucheck/sections_workflows.py), after section 1 (the machine's facts), in the order
# of their value, each trained for --minutes and started only when its estimate fits the deadline:
#   11 OpenKBP on the real 16-patient sample: import, train (GPU cache, CUDA graph, bf16; fp16 if time
#      is left), predict the validation patients with TTA, evaluate openkbp (dose and DVH scores)
#   12 2D slices: PNG slices (trainer synth --format png), import images, train fp16, predict -i, Dice
#   13 thin surfaces: TIFF volumes, import tiff, train, predict, evaluate surface
#   14 nnU-Net-style: raw NIfTI folder, import nnunet, plan --device cuda, train, predict -i, evaluate
# Each writes one row (commands, minutes, epochs, samples/s, GPU busy share, data wait, peak memory,
# the score, the seed's figure beside it) into DIR/gpu-report.md and .json, with logs.tar.gz: three
# files, rewritten before and after every command, valid when the script is killed at any moment.
# Without CUDA every section is SKIPPED and its CPU rehearsal runs the same commands at a tiny size.
#
#   scripts/bench/workflows.sh --deadline SECONDS --report DIR [--work DIR] [--openkbp FILE|DIR]
#                              [--minutes M] [--plan]
# --openkbp: openkbp-sample.tar.xz or a provided-data folder; default the first of
# ./openkbp-sample.tar.xz, the bundle's root, ../shared/data/ beside the source tree. --minutes:
# training minutes per workflow (default 0.5: the four inside --deadline 480 on an H100, by the
# estimates of scripts/bench/gpucheck/estimates.py). Every other argument goes to scripts/gpu-check.sh.
# Exit codes as gpu-check's: 0 nothing failed, 1 a section failed, 2 bad arguments.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
root="$(cd "$here/../.." && pwd)"
openkbp=()
for arg in "$@"; do
  if [ "$arg" = "--openkbp" ]; then openkbp=(none); fi
done
if [ ${#openkbp[@]} -eq 0 ]; then
  for f in "$PWD/openkbp-sample.tar.xz" "$root/openkbp-sample.tar.xz" "$root/../shared/data/openkbp-sample.tar.xz"; do
    if [ -e "$f" ]; then openkbp=(--openkbp "$f"); break; fi
  done
else
  openkbp=()
fi
exec "$root/scripts/gpu-check.sh" --only 1,openkbp,slices,surface,nnunet --minutes 0.5 "${openkbp[@]}" "$@"
