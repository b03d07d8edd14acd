#!/usr/bin/env bash
# From nothing to a trained dose-prediction model on the built-in phantom:
# install, build, make data, train configs/quickstart.yaml, predict the validation cases and
# print the validation error next to the "predict the mean" baseline, put `trainer` on PATH
# (scripts/install.sh: ~/.local/bin) and print the next commands. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
# Only what this script runs, as a unity build (preset quick: eight sources per compiler run, so
# LibTorch's headers and templates are compiled 17 times instead of 135): about half the time of a
# fresh release build. scripts/test.sh builds build/release, which rebuilds one file at a time.
scripts/build.sh quick trainer
TRAINER=build/quick/trainer
DATA=data/phantom_dose.h5
if [ ! -f "$DATA" ]; then
  mkdir -p data
  "$TRAINER" synth --task dose --cases 40 --size 32 --seed 0 --out "$DATA"
fi
RESUME=()
if ls runs/quickstart/checkpoints/epoch_*.pt >/dev/null 2>&1; then RESUME=(--resume); fi
start=$(date +%s)
"$TRAINER" --config configs/quickstart.yaml "${RESUME[@]}"
echo "[quickstart] training took $(( $(date +%s) - start )) s"
"$TRAINER" --config configs/quickstart.yaml --predict-only --checkpoint best
echo "[quickstart] validation mean absolute dose error (Gy), per case and mean:"
column -s, -t < runs/quickstart/predictions/val_metrics.csv
U3D_BUILD_DIR=build/quick scripts/install.sh   # trainer on PATH: ~/.local/bin/trainer -> build/quick/trainer
cat <<'EOF'
[quickstart] next:
    trainer resume -c configs/quickstart.yaml --set training.epochs=50 --allow-config-change training.epochs   # train on
    trainer predict -c configs/quickstart.yaml              # predict the validation cases with the best checkpoint
    trainer plan data/phantom_dose.h5 --out plan.yaml       # a recipe sized for your data and GPU
EOF
