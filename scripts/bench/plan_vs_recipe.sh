#!/bin/bash
# `trainer plan`'s config against the hand-written nnU-Net-like recipe on one dataset, in the same
# wall-clock budget (training.max_minutes), on the CPU; each run then predicts the val split, and
# the two val Dice values are printed (docs/segmentation.md, "Measured figures").
#
#   scripts/bench/plan_vs_recipe.sh DATA.h5 PATCH MINUTES TAG [RECIPE OVERRIDES...]
#
# e.g. (phantoms, then anisotropic NIfTI phantoms; see docs/segmentation.md):
#   trainer synth --task segmentation --cases 24 --size 32 --out seg.h5
#   scripts/bench/plan_vs_recipe.sh seg.h5 32 5 seg
#   scripts/bench/plan_vs_recipe.sh aniso.h5 [16,64,64] 5 aniso --set model.levels=5
# Runs go to runs/<TAG>_planned and runs/<TAG>_hand in the working folder; TRAINER overrides the
# executable (default build/release/trainer beside this script).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
trainer=${TRAINER:-$here/build/release/trainer}
usage() { echo "plan_vs_recipe.sh: $*" >&2; exit 2; }  # a bad argument: one line, exit 2, nothing written
[ $# -ge 4 ] || usage "expected DATA.h5 PATCH MINUTES TAG [RECIPE OVERRIDES...], got $# argument(s) (the script's head says more)"
data=$1 patch=$2 minutes=$3 tag=$4
shift 4
[ -f "$data" ] || usage "DATA.h5 $data: no such dataset file"
{ [[ "$minutes" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk "BEGIN { exit !($minutes > 0) }"; } ||
  usage "MINUTES $minutes: expected a positive number of minutes"
[[ "$tag" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || usage "TAG $tag: expected letters, digits, '_', '-' and '.' (a run name)"
[ -f "$trainer" ] && [ -x "$trainer" ] || usage "TRAINER $trainer: not an executable (scripts/build.sh release trainer)"
common=(--set "training.max_minutes=$minutes" --set training.threads=2 --set training.device=cpu
        --set logging.progress_seconds=0 --set logging.plot=false)
"$trainer" plan "$data" --out "${tag}_plan.yaml" --force
recipe=(--config "$here/configs/segmentation_nnunet_like.yaml" --set "data.path=$data"
        --set "data.normalize=[zscore]" --set "data.patch_size=$patch" "$@")
for run in planned hand; do
  if [ $run = planned ]; then args=(--config "${tag}_plan.yaml"); else args=("${recipe[@]}"); fi
  if ! /usr/bin/time -f "${tag}_$run: %e s wall, %M KB peak RSS" \
    "$trainer" "${args[@]}" "${common[@]}" --set "experiment.name=${tag}_$run" > "${tag}_$run.log" 2>&1; then
    echo "${tag}_$run failed (${tag}_$run.log):" >&2
    tail -3 "${tag}_$run.log" >&2
    exit 1
  fi
  tail -1 "${tag}_$run.log"
  "$trainer" "${args[@]}" "${common[@]}" --set "experiment.name=${tag}_$run" --predict-only \
    --set predict.split=val >> "${tag}_$run.log" 2>&1
  grep -a 'split mean dice' "${tag}_$run.log" | sed "s/^.*predict:/${tag}_$run:/"
done
