#!/usr/bin/env bash
# The 2D slice user's recipe (configs/slices_2d.yaml, model.preset unet2d: 7.76 M parameters, batch
# of 256 x 256 slices, bf16, AdamW) measured three ways on one device, in one call (docs/slices.md,
# docs/performance.md "2D U-Net on slices"):
#   1. `trainer --benchmark` step time and slices/s at each batch of BATCHES, CUDA graph on and off;
#   2. the same network and step in PyTorch (scripts/bench/compare.py: eager and torch.compile) at
#      the recipe's batch 16;
#   3. end to end: `trainer train` for EPOCHS epochs on CASES phantom volumes of SLICES x 256 x 256
#      (the slice user's 1,753 training slices: 20 x 88), data in the GPU cache (data.cache auto),
#      the epoch line's samples/s = slices/s with sampling, augmentation and validation's share.
#   scripts/bench/slices.sh [--trainer T] [--python PY] [--device cuda|cpu] [--batches "16 64 128"]
#                           [--variants eager,compile] [--cases 20 --slices 88 --epochs 3] [--quick]
# --quick (CPU smoke): 64 x 64 slices, batch 4, 2 steps, 2 cases of 8 slices, 1 epoch, eager only.
# Prints each command's JSON/epoch lines and one markdown table at the end.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
trainer="$root/build/release/trainer"; [ -x "$root/bin/trainer" ] && trainer="$root/bin/trainer"
py="${U3D_PYTHON:-python3}"; device=cuda; batches="16 64 128"; variants="eager,compile"
cases=20; slices=88; epochs=3; size=256; steps=30; warmup=5; quick=0
usage() { echo "slices.sh: $*" >&2; exit 2; }  # a bad argument: one line, exit 2, nothing made
while [ $# -gt 0 ]; do
  case "$1" in
    --trainer|--python|--device|--batches|--variants|--cases|--slices|--epochs)
      [ $# -ge 2 ] || usage "$1: expected a value" ;;
  esac
  case "$1" in
    --trainer) trainer="$2"; shift 2 ;; --python) py="$2"; shift 2 ;; --device) device="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;; --variants) variants="$2"; shift 2 ;; --cases) cases="$2"; shift 2 ;;
    --slices) slices="$2"; shift 2 ;; --epochs) epochs="$2"; shift 2 ;;
    --quick) quick=1; size=64; batches=4; steps=2; warmup=1; cases=2; slices=8; epochs=1; variants=eager; shift ;;
    *) usage "unknown argument $1" ;;
  esac
done
positive() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage "$1 $2: expected a positive whole number"; }
positive --cases "$cases"; positive --slices "$slices"; positive --epochs "$epochs"
[ -n "${batches// /}" ] || usage "--batches '$batches': expected batch sizes, e.g. \"16 64 128\""
for b in $batches; do positive --batches "$b"; done
case "$device" in cuda|cpu) ;; *) usage "--device $device: expected cuda or cpu" ;; esac
for v in ${variants//,/ }; do
  case "$v" in eager|compile) ;; *) usage "--variants $variants: expected eager and/or compile, separated by ','" ;; esac
done
[ -f "$trainer" ] && [ -x "$trainer" ] || usage "--trainer $trainer: not an executable (scripts/build.sh release trainer)"
command -v "$py" >/dev/null || usage "--python $py: not found"
T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-slices-XXXXXX")"
trap 'rm -rf "$T"' EXIT
cfg="$root/configs/slices_2d.yaml"
"$trainer" synth --task segmentation --cases "$cases" --size "$slices,$size,$size" --seed 0 --out "$T/slices.h5" -q
common=(--set data.path="$T/slices.h5" --set training.device="$device" --set data.patch_size="[1,$size,$size]")
rows=()
row() {  # JSON line -> markdown row
  "$py" -c 'import json,sys; d=json.loads(sys.argv[1]); print("| %s | %s | %d | %s | %.2f | %.0f | %.1f | %s |" % (d["tool"], d.get("cuda_graph", "-"), d["batch"], d["precision"], d["step_ms_median"], d["samples_per_s"], d["tflops"], round((d.get("peak_gpu_reserved_bytes") or 0) / 2**30, 2)))' "$1"
}
for b in $batches; do
  for g in on off; do
    [ "$device" = cpu ] && [ "$g" = on ] && continue
    line="$("$trainer" --config "$cfg" --benchmark --steps "$steps" --warmup "$warmup" "${common[@]}" \
      --set data.batch_size="$b" --set training.cuda_graph="$g" 2>&1 | grep '^{"benchmark": "step"')"
    echo "$line"; rows+=("$(row "$line")")
  done
done
b0="${batches%% *}"
out="$("$py" "$here/compare.py" --config "$cfg" --trainer "$trainer" --python "$py" --steps "$steps" --warmup "$warmup" \
  --variants "$variants" "${common[@]}" --set data.batch_size="$b0" 2>&1)" || { echo "$out" | tail -5; exit 1; }
echo "$out" | grep '^{' || true
while read -r line; do rows+=("$(row "$line")"); done < <(echo "$out" | grep '^{"benchmark": "step", "tool": "pytorch')
"$trainer" train -c "$cfg" "${common[@]}" --set data.batch_size="$b0" --set training.epochs="$epochs" \
  --set experiment.output_dir="$T/runs" --set logging.progress_seconds=0 2>&1 | grep -E "epoch [0-9]+/|cache|captured" || true
echo
echo "| tool | CUDA graph | batch | precision | step ms | slices/s | TFLOP/s | peak GiB |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
