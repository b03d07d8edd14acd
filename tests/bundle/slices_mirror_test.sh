#!/usr/bin/env bash
# ctest slices.mirror (label integration): the 2D U-Net (model.dims 2, issue 37) is the network its
# PyTorch build says it is. (1) model.preset unet2d with one output channel against the slice user's
# published layer list (tests/python/buda_reference.py BudaUNet2d: max-pooling, 7,762,465 parameters)
# and against pytorch_step.py --arch unet --dims 2 (the trainer's 2D network in torch.nn, from
# scripts/python/u3d_model): parameter
# counts equal, and FLOPs equal to pytorch_step.py's; (2) a few tiny 2D configurations the same way;
# (3) compare.py runs both steps on a 2D config (eager, CPU) and reports the same network; (4)
# profile_step.py profiles that 2D step (any pytorch_step.py network, not only the OpenKBP baseline):
# its recorded steps, and convolution and batch-norm ops among its top entries; (5) a one-step 2D run
# exported: pytorch_step.py --dims 2 builds a network with the export's parameter names and shapes.
# Exit 77 (skipped) without a Python that has torch.
#   tests/bundle/slices_mirror_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
source "$(dirname "$0")/../support/torch_test.sh"
torch_test_setup slices-mirror "$@"
"$BUILD/trainer" synth --task segmentation --cases 2 --size 8,64,64 --seed 0 --out seg.h5 >/dev/null 2>&1
fail=0
# the slice user's network: one output channel (the trainer's 2-class softmax has one more head row)
buda="$("$PY" "$SRC/tests/python/buda_reference.py")"
# levels base max convs patch out_channels(pytorch side; the dataset has 4 classes)
while read -r levels base max convs patch preset; do
  sets=(--set training.device=cpu --set data.path="$T/seg.h5" --set data.batch_size=1 --set data.patch_size="$patch")
  if [ "$preset" = unet2d ]; then
    sets+=(--set model.preset=unet2d)
  else
    sets+=(--set model.dims=2 --set model.levels="$levels" --set model.base_filters="$base" --set model.max_filters="$max"
           --set model.convs_per_level="$convs" --set model.norm=batch --set model.activation=relu)
  fi
  ours="$("$BUILD/trainer" --config "$SRC/configs/slices_2d.yaml" --benchmark --steps 1 --warmup 0 "${sets[@]}" 2>&1 |
          grep '^{"benchmark": "step"')" || { echo "FAIL: trainer --benchmark ($levels $base $max $convs $patch)"; fail=1; continue; }
  read -r params flops cin cout < <(echo "$ours" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"], d["in_channels"], d["out_channels"])')
  [ "$preset" = unet2d ] && { levels=5; base=32; max=512; convs=2; }
  size="${patch##*,}"; size="${size%]}"; size="${size// /}"
  theirs="$("$PY" "$SRC/scripts/bench/pytorch_step.py" --arch unet --dims 2 --params-only --size "$size" --in-channels "$cin" \
    --out-channels "$cout" --levels "$levels" --base-filters "$base" --max-filters "$max" --convs-per-level "$convs" \
    --norm batch --activation relu --deep-supervision 0 2>/dev/null | grep '^{')"
  one="$("$PY" "$SRC/scripts/bench/pytorch_step.py" --arch unet --dims 2 --params-only --size "$size" --in-channels 1 \
    --out-channels 1 --levels "$levels" --base-filters "$base" --max-filters "$max" --convs-per-level "$convs" \
    --norm batch --activation relu --deep-supervision 0 2>/dev/null | grep '^{')"
  read -r tparams tflops < <(echo "$theirs" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"])')
  oparams="$(echo "$one" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["parameters"])')"
  echo "2D levels $levels base $base max $max convs $convs patch $patch ($preset, $cin -> $cout): trainer $params" \
       "parameters, $flops FLOPs; PyTorch $tparams, $tflops; 1 -> 1: $oparams"
  if [ "$params" != "$tparams" ] || [ "$flops" != "$tflops" ]; then echo "FAIL: parameter or FLOP counts differ"; fail=1; fi
  if [ "$preset" = unet2d ] && { [ "$oparams" != "$buda" ] || [ "$buda" != 7762465 ]; }; then
    echo "FAIL: unet2d with one output has $oparams parameters, the published network $buda (expected 7762465)"; fail=1
  fi
done <<'ROWS'
5 32 512 2 [1,64,64] unet2d
3 4 16 2 [1,32,32] none
4 2 8 3 [1,16,16] none
ROWS
compare_same_network unet --config "$SRC/configs/slices_2d.yaml" --set training.device=cpu --set data.path="$T/seg.h5" \
  --set data.patch_size=[1,32,32] --set model.levels=3 --set model.base_filters=2 --set model.max_filters=8 \
  --set data.batch_size=2 || fail=1
prof="$("$PY" "$SRC/scripts/bench/profile_step.py" --device cpu --arch unet --dims 2 --levels 3 --base-filters 2 \
  --max-filters 8 --norm batch --activation relu --deep-supervision 0 --out-channels 1 --loss bce_dice --optimizer adamw \
  --size 32 --batch 2 --precision fp32 --steps 2 --warmup 1 --top 40 2>/dev/null | grep '^{')" || { echo "FAIL: profile_step.py"; fail=1; }
echo "$prof" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
names = " ".join(k["name"] for k in d["top"])
print("profile_step.py, 2D U-Net: %d profiled steps, %.2f ms per step, top: %s" % (d["profiled_steps"], d["time_per_step_ms"], names[:200]))
assert d["profiled_steps"] == 2 and d["steps"] == 2, d
assert "convolution" in names and "batch_norm" in names, names
' || { echo "FAIL: profile_step.py on the 2D step"; fail=1; }
same_names_as_export unet2d "--arch unet --dims 2 --levels 3 --base-filters 2 --max-filters 8 --norm batch
  --activation relu --deep-supervision 0 --size 32 --in-channels 1 --out-channels 3" \
  --config "$SRC/configs/slices_2d.yaml" --set training.device=cpu --set data.path="$T/seg.h5" \
  --set data.patch_size=[1,32,32] --set model.levels=3 --set model.base_filters=2 --set model.max_filters=8 \
  --set data.batch_size=2 || fail=1
[ "$fail" = 0 ] && echo PASS
exit "$fail"
