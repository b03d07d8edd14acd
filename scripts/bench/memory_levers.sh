#!/usr/bin/env bash
# Memory levers (docs/performance.md, "Memory levers"): step time, peak memory and throughput of the
# residual-encoder and plain U-Nets with activation checkpointing off/encoder/all and with 2
# micro-batches of 1 accumulated instead of one batch of 2, as `trainer --benchmark` measures them.
# Prints one markdown row per run. On a GPU the memory column is the peak reserved GPU memory, on
# the CPU the process's peak RSS.
#   scripts/bench/memory_levers.sh [TRAINER] [--set key=value ...]    (extra --set go to every run)
# e.g. on a GPU at nnU-Net's default patch:
#   scripts/bench/memory_levers.sh build/release/trainer --set data.patch_size=128 --set training.device=cuda \
#       --set model.base_filters=32 --set model.max_filters=320 --set model.levels=6
set -euo pipefail
TRAINER="${1:-$(dirname "$0")/../../build/release/trainer}"
shift || true
EXTRA=("$@")
T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-levers-XXXXXX")"
trap 'rm -rf "$T"' EXIT
"$TRAINER" synth --task segmentation --cases 2 --size 32 --seed 0 --out "$T/seg.h5" >/dev/null 2>&1
printf 'data: {path: %s/seg.h5, batch_size: 2, patch_size: 64}\nmodel: {preset: resenc_m, deep_supervision: true}\ntraining: {device: cpu, loss: dice_ce, threads: 1}\n' \
  "$T" > "$T/resenc.yaml"
echo "| Network | Checkpointing | Batch x micro-batches | Parameters | Step ms | Peak memory MB | samples/s |"
echo "|---|---|---|---|---|---|---|"
row() {
  "$TRAINER" --config "$T/resenc.yaml" --benchmark --steps 3 --warmup 1 "$@" "${EXTRA[@]}" 2>&1 |
    grep '^{"benchmark": "step"' | python3 -c '
import json, sys
d = json.load(sys.stdin)
mem = d["peak_gpu_reserved_bytes"] if d["peak_gpu_reserved_bytes"] is not None else d["peak_host_rss_bytes"]
print("| %s | %s | %d x %d | %d | %.0f | %.0f | %.3f |" % (d["architecture"], d["activation_checkpointing"], d["batch"],
      d["accumulate_steps"], d["parameters"], d["step_ms_median"], mem / 1e6, d["samples_per_s"]))'
}
R=(--set model.base_filters=16 --set model.max_filters=64 --set model.levels=4)
U=("${R[@]}" --set model.preset=none --set model.architecture=unet --set model.convs_per_level=2)
for c in off encoder all; do row "${R[@]}" --set model.activation_checkpointing=$c; done
row "${R[@]}" --set data.batch_size=1 --set training.accumulate_steps=2
row "${R[@]}" --set data.batch_size=1 --set training.accumulate_steps=2 --set model.activation_checkpointing=all
for c in off encoder all; do row "${U[@]}" --set model.activation_checkpointing=$c; done
row "${U[@]}" --set data.batch_size=1 --set training.accumulate_steps=2
