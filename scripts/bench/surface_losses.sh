#!/bin/bash
# Surface recipe figures on the CPU (docs/surface.md, "Figures"), in the working folder:
#   0. step time and peak memory of configs/surface.yaml as shipped, on the CPU;
#   1. step time of a smaller network for each loss list (the cost of each term), skeleton recall
#      and boundary with the ground-truth maps cached per case (default) and made per batch;
#   2. batches/s of the sampler with and without elastic deformation (1 and 2 threads);
#   3. the competition score of Dice+CE against Dice+CE+clDice+skeleton recall trained for the same
#      wall-clock time on surface phantoms (NIfTI through import nnunet, so predictions are NIfTI
#      files that `trainer evaluate surface` scores);
#   4. the time the cache spends making the ground-truth maps at load, and its size with and without;
#   5. the same for competition-sized cases (320^3; 4 surface phantoms, 3 of them in training), on one
#      loading thread, so the maps' time is per case x 3.
#
#   scripts/bench/surface_losses.sh [MINUTES (default 5)] [PATCH (default [32,64,64])]
# SECTIONS=1,4 runs only those sections (default: all). SEED=N sets experiment.seed (the draws of
# samples, augmentations and initial weights; section 3 is one seed per run).
# TRAINER overrides the executable (default build/release/trainer beside this script).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
trainer=${TRAINER:-$here/build/release/trainer}
minutes=${1:-5}
patch=${2:-[32,64,64]}
cfg=(--config "$here/configs/surface.yaml" --set training.device=cpu --set training.threads=2
     --set "data.patch_size=$patch" --set model.levels=4 --set model.base_filters=16
     --set logging.progress_seconds=0 --set logging.plot=false ${SEED:+--set experiment.seed=$SEED})

[ -d Dataset777_Surface ] || "$trainer" synth --task surface --cases 24 --size 64 --format nnunet \
  --out Dataset777_Surface > /dev/null
[ -f surface_bench.h5 ] || "$trainer" import nnunet --source Dataset777_Surface --out surface_bench.h5 > /dev/null
cfg+=(--set data.path=surface_bench.h5)

step_figures() {  # the step benchmark's JSON line -> "median ... ms/step ..., peak RSS ... GiB"
  grep -a '^{"benchmark": "step"' | python3 -c 'import json, sys
r = json.load(sys.stdin)
print("median %.0f ms/step (p10 %.0f, p90 %.0f), peak RSS %.2f GiB, %.1f M parameters" % (r["step_ms_median"],
      r["step_ms_p10"], r["step_ms_p90"], r["peak_host_rss_bytes"] / 2**30, r["parameters"] / 1e6))'
}

want() { [[ ",${SECTIONS:-0,1,2,3,4,5}," == *",$1,"* ]]; }
declare -A losses=(
  [dice_ce]="dice_ce"
  [+cldice]="[{name: ce}, {name: dice}, {name: cldice, weight: 0.5}]"
  [+skeleton_recall]="[{name: ce}, {name: dice}, {name: skeleton_recall}]"
  [+boundary]="[{name: ce}, {name: dice}, {name: boundary, weight: 0.1}]"
  [all]="[{name: ce}, {name: dice}, {name: cldice, weight: 0.5}, {name: skeleton_recall}, {name: boundary, weight: 0.1}]"
)
if want 0; then
echo "== 0. configs/surface.yaml as shipped (72x136x136, batch 2, every term, deep supervision), fp32 on the CPU"
"$trainer" --config "$here/configs/surface.yaml" --set training.device=cpu --set training.threads=2 \
  --set data.path=surface_bench.h5 --benchmark --steps 2 --warmup 1 2>/dev/null | step_figures

fi
if want 1; then
echo "== 1. step time per loss list (patch $patch, batch 2, 4 levels, 16 filters, fp32, 2 threads)"
for name in dice_ce +cldice +skeleton_recall +boundary all; do
  out=$("$trainer" "${cfg[@]}" --set "training.loss=${losses[$name]}" --benchmark --steps 5 --warmup 1 2>/dev/null |
        step_figures)
  echo "$name: $out"
  case $name in +skeleton_recall|+boundary|all)
    out=$("$trainer" "${cfg[@]}" --set "training.loss=${losses[$name]}" --set training.cache_truth_maps=false \
          --benchmark --steps 5 --warmup 1 2>/dev/null | step_figures)
    echo "$name, maps per batch: $out" ;;
  esac
done

fi
if want 2; then
echo "== 2. sampler batches/s, elastic off and on (elastic_prob 1)"
for elastic in 0 1; do
  "$trainer" "${cfg[@]}" --set augment.elastic_prob=$elastic --benchmark data --workers 1,2 \
    --benchmark-seconds 10 2>&1 | grep -a 'memory' | sed "s/^/elastic_prob=$elastic: /"
done

fi
if want 3; then
echo "== 3. Dice+CE against Dice+CE+clDice+skeleton recall, $minutes minutes each"
# Short epochs (25 steps) so both runs use the whole budget (a run stops after the epoch whose
# successor would overrun it).
common=("${cfg[@]}" --set "training.max_minutes=$minutes" --set training.steps_per_epoch=25 --set training.val_full=false
        --set training.val_patch_batches=4 --set predict.nifti=true --set predict.tta=none)
run() {  # name, loss
  "$trainer" "${common[@]}" --set "experiment.name=$1" --set "training.loss=$2" > "$1.log" 2>&1
  "$trainer" "${common[@]}" --set "experiment.name=$1" --set "training.loss=$2" --predict-only \
    --set predict.split=val >> "$1.log" 2>&1
  "$trainer" evaluate surface --reference Dataset777_Surface/labelsTr --predictions "runs/$1/predictions/val" \
    --ignore-label 2 --only-predicted --force 2>&1 | grep -a -i 'mean' | sed "s/^/$1: /"
}
run surface_dice_ce "[{name: ce}, {name: dice}]"
run surface_topo "[{name: ce}, {name: dice}, {name: cldice, weight: 0.5}, {name: skeleton_recall}]"

fi
if want 4; then
echo "== 4. ground-truth maps made at cache load (skeleton_recall + boundary, 2 loading threads), cache size"
for cached in true false; do
  "$trainer" "${cfg[@]}" --set "training.loss=${losses[all]}" --set training.cache_truth_maps=$cached \
    --benchmark data --workers 1 --benchmark-seconds 3 2>&1 |
    grep -a -E 'data.cache: [0-9]+ cases|benchmark: cache' | sed "s/^/cache_truth_maps=$cached: /"
done
fi
if want 5; then
echo "== 5. ground-truth maps of 320^3 cases (configs/surface.yaml's loss list), 1 loading thread, cache size"
[ -f surface_320.h5 ] || "$trainer" synth --task surface --cases 4 --size 320 --out surface_320.h5 > /dev/null
for cached in true false; do
  "$trainer" --config "$here/configs/surface.yaml" --set training.device=cpu --set training.threads=1 \
    --set data.path=surface_320.h5 --set training.cache_truth_maps=$cached \
    --benchmark data --workers 1 --benchmark-seconds 3 2>&1 |
    grep -a -E 'data.cache: [0-9]+ cases|benchmark: cache' | sed "s/^/cache_truth_maps=$cached: /"
done
fi
