#!/usr/bin/env bash
# ctest gpu_check.unet_mirror (label integration): the PyTorch U-Net of scripts/bench/pytorch_step.py
# (--arch unet, gpu-check section 4's nnU-Net-like side) is the trainer's network, and --arch resenc
# (nnU-Net's residual-encoder U-Net) is model.architecture resenc_unet: for a few tiny
# configurations of configs/segmentation_nnunet_like.yaml on the CPU, `trainer --benchmark` and
# `pytorch_step.py --params-only` agree on the parameter count and on the forward FLOPs; then one
# compare.py run (both steps, eager) must report parameters_equal and flops_equal, and one more with
# anisotropic kernels, strides and patch; last, a one-step run of each architecture exported: the
# network pytorch_step.py builds (scripts/python/u3d_model) has the export's parameter names and shapes.
# Exit 77 (skipped) without a Python that has torch.
#   tests/bundle/unet_mirror_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
source "$(dirname "$0")/../support/torch_test.sh"
torch_test_setup unet-mirror "$@"
"$BUILD/trainer" synth --task segmentation --cases 2 --size 32 --seed 0 --out seg.h5 >/dev/null 2>&1
CFG="$SRC/configs/segmentation_nnunet_like.yaml"
fail=0
# levels base max convs kernel deep_supervision patch
while read -r levels base max convs kernel deep patch; do
  sets=(--set training.device=cpu --set data.path="$T/seg.h5" --set data.batch_size=1 --set data.patch_size="$patch"
        --set model.levels="$levels" --set model.base_filters="$base" --set model.max_filters="$max"
        --set model.convs_per_level="$convs" --set model.kernel_size="$kernel" --set model.deep_supervision="$deep")
  ours="$("$BUILD/trainer" --config "$CFG" --benchmark --steps 1 --warmup 0 "${sets[@]}" 2>&1 | grep '^{"benchmark": "step"')" ||
    { echo "FAIL: trainer --benchmark ($levels $base $max $convs $kernel $deep $patch)"; fail=1; continue; }
  read -r params flops cin cout < <(echo "$ours" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"], d["in_channels"], d["out_channels"])')
  deep01=$([ "$deep" = true ] && echo 1 || echo 0)
  theirs="$("$PY" "$SRC/scripts/bench/pytorch_step.py" --arch unet --params-only --size "$patch" --in-channels "$cin" \
    --out-channels "$cout" --levels "$levels" --base-filters "$base" --max-filters "$max" --convs-per-level "$convs" \
    --kernel-size "$kernel" --deep-supervision "$deep01" 2>/dev/null | grep '^{')"
  read -r tparams tflops < <(echo "$theirs" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"])')
  echo "levels $levels base $base max $max convs $convs kernel $kernel deep $deep patch $patch ($cin -> $cout):" \
       "trainer $params parameters, $flops FLOPs; PyTorch $tparams, $tflops"
  if [ "$params" != "$tparams" ] || [ "$flops" != "$tflops" ]; then
    echo "FAIL: parameter or FLOP counts differ"; fail=1
  fi
done <<'ROWS'
4 4 12 2 3 true 32
5 2 16 2 3 false 32
3 4 8 3 5 true 16
6 32 320 2 3 true 64
ROWS
# nnU-Net's residual-encoder U-Net (model.architecture resenc_unet, scripts/bench/pytorch_step.py
# --arch resenc, defaults from nnU-Net's published ResEnc plans): nnU-Net always builds a segmentation
# layer per decoder stage, so both run with deep supervision. The last row is the resenc_m
# preset alone (a config with no other model key) at 64^3: 5 levels, 32..320 filters, blocks
# 1,3,4,6,6. (The 6-level preset at 128^3 is checked by count in unit/train/memory_levers_test.cpp.)
printf 'data: {path: %s/seg.h5, batch_size: 1, patch_size: 64}\nmodel: {preset: resenc_m, deep_supervision: true}\ntraining: {device: cpu, loss: dice_ce}\n' \
  "$T" > "$T/preset.yaml"
# levels base max decoder_convs blocks patch preset
while read -r levels base max convs blocks patch preset; do
  if [ "$preset" = none ]; then
    cfg=("$CFG" --set model.architecture=resenc_unet --set model.levels="$levels" --set model.base_filters="$base"
         --set model.max_filters="$max" --set model.convs_per_level="$convs" --set model.blocks_per_level="[$blocks]"
         --set training.device=cpu --set data.path="$T/seg.h5" --set data.batch_size=1 --set data.patch_size="$patch"
         --set model.deep_supervision=true)
  else
    cfg=("$T/preset.yaml")
  fi
  ours="$("$BUILD/trainer" --config "${cfg[@]}" --benchmark --steps 1 --warmup 0 2>&1 | grep '^{"benchmark": "step"')" ||
    { echo "FAIL: trainer --benchmark resenc ($levels $base $max $convs $blocks $patch $preset)"; fail=1; continue; }
  read -r params flops cin cout arch < <(echo "$ours" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"], d["in_channels"], d["out_channels"], d["architecture"])')
  theirs="$("$PY" "$SRC/scripts/bench/pytorch_step.py" --arch resenc --params-only --size "$patch" --in-channels "$cin" \
    --out-channels "$cout" --levels "$levels" --base-filters "$base" --max-filters "$max" --convs-per-level "$convs" \
    --blocks-per-level "$blocks" 2>/dev/null | grep '^{')"
  read -r tparams tflops < <(echo "$theirs" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["parameters"], d["forward_flops_per_sample"])')
  echo "resenc levels $levels base $base max $max decoder convs $convs blocks $blocks patch $patch ($preset, $cin -> $cout):" \
       "trainer $arch $params parameters, $flops FLOPs; PyTorch (nnU-Net's configuration) $tparams, $tflops"
  if [ "$arch" != resenc_unet ] || [ "$params" != "$tparams" ] || [ "$flops" != "$tflops" ]; then
    echo "FAIL: resenc parameter or FLOP counts differ"; fail=1
  fi
done <<'ROWS'
2 4 8 1 1,2 16 none
4 4 16 1 1,2,2,3 32 none
3 8 16 2 2,1,1 16 none
5 32 320 1 1,3,4,6,6 64 resenc_m
ROWS
compare_same_network unet --config "$CFG" --set training.device=cpu --set data.path="$T/seg.h5" --set data.patch_size=16 \
  --set model.levels=3 --set model.base_filters=2 --set model.max_filters=8 --set data.batch_size=1 || fail=1
# nnU-Net's anisotropic topology (model.kernel_sizes / model.strides per stage, a patch that is not a
# cube): compare.py hands the trainer's resolved lists to pytorch_step.py --kernel-sizes / --strides.
compare_same_network unet --config "$CFG" --set training.device=cpu --set data.path="$T/seg.h5" \
  --set "data.patch_size=[8, 32, 32]" --set model.levels=3 --set model.base_filters=2 --set model.max_filters=8 \
  --set data.batch_size=1 --set "model.kernel_sizes=[[1, 3, 3], [1, 3, 3], [3, 3, 3]]" \
  --set "model.strides=[[1, 1, 1], [1, 2, 2], [2, 2, 2]]" || fail=1
tiny=(--config "$CFG" --set training.device=cpu --set data.path="$T/seg.h5" --set data.batch_size=1
      --set data.patch_size=16 --set model.levels=3 --set model.base_filters=4 --set model.max_filters=16
      --set model.deep_supervision=true)
same_names_as_export unet "--arch unet --levels 3 --base-filters 4 --max-filters 16 --size 16 --in-channels 1
  --out-channels 4 --deep-supervision 1" "${tiny[@]}" || fail=1
same_names_as_export resenc "--arch resenc --levels 3 --base-filters 4 --max-filters 16 --size 16 --in-channels 1
  --out-channels 4 --blocks-per-level 1,2,2" "${tiny[@]}" --set model.architecture=resenc_unet \
  --set "model.blocks_per_level=[1, 2, 2]" || fail=1
[ "$fail" = 0 ] && echo PASS
exit "$fail"
