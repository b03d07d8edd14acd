#!/usr/bin/env bash
# ctest mlperf.mirror (label integration): model.preset mlperf_unet3d is the MLPerf Training 3D
# U-Net. On the CPU: KiTS-like phantoms (`trainer synth --task kits`) train end to end with
# configs/mlperf_unet3d.yaml (the full network, patch 32, two steps and a validation); the run's
# export (model.ts traced from the C++ network, model.safetensors) has the reference's parameter
# names, shapes, order and count (31,190,243), and its forward pass equals the reference's
# (tests/python/mlperf_reference.py: the reference's layer list in torch.nn) and u3d_model.py's to
# float32 tolerance; then compare.py (trainer --benchmark step beside pytorch_step.py --arch
# mlperf_unet3d, eager) on a reduced network reports parameters_equal and flops_equal.
# Exit 77 (skipped) without a Python that has torch.
#   tests/bundle/mlperf_mirror_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
source "$(dirname "$0")/../support/torch_test.sh"
torch_test_setup mlperf-mirror "$@"
CFG="$SRC/configs/mlperf_unet3d.yaml"
"$BUILD/trainer" synth --task kits --cases 3 --size 32 --seed 0 --out kits.h5 >/dev/null 2>&1
fail=0
common=(--set training.device=cpu --set data.path="$T/kits.h5" --set data.patch_size=32 --set data.batch_size=1)
"$BUILD/trainer" --config "$CFG" "${common[@]}" --set experiment.output_dir="$T/runs" --set training.epochs=1 \
  --set training.steps_per_epoch=2 --set training.warmup_steps=2 --set training.val_every=1 \
  --set checkpoint.every_epochs=1 --set predict.overlap=0 --set logging.plot=false > train.log 2>&1 ||
  { tail -20 train.log; echo "FAIL: training configs/mlperf_unet3d.yaml on kits phantoms"; exit 1; }
grep -E "mlperf_unet3d|parameters" train.log | head -3 || true
tail -1 "$T/runs/mlperf_unet3d/metrics.csv"
"$BUILD/trainer" export "$T/runs/mlperf_unet3d" --format safetensors,torchscript --out "$T/export" > export.log 2>&1 ||
  { tail -5 export.log; echo "FAIL: trainer export"; exit 1; }
"$PY" "$SRC/tests/python/mlperf_reference.py" "$T/export" "$SRC/scripts/python" || fail=1
compare_same_network mlperf_unet3d --config "$CFG" "${common[@]}" --set training.precision=fp32 --set model.levels=4 \
  --set model.base_filters=4 --set model.max_filters=16 || fail=1
[ "$fail" = 0 ] && echo PASS
exit "$fail"
