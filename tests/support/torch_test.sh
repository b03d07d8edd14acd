# Sourced by the shell tests that need the torch venv's Python (tests/bundle/*_mirror_test.sh,
# tests/integration/watch_and_export_test.sh), called as `test.sh BUILD_DIR [VENV_PYTHON]`.
#   torch_test_setup NAME BUILD_DIR [VENV_PYTHON]
# sets BUILD (the build folder), PY (the Python, default python3) and SRC (the source tree); exits
# 77 (skipped) when PY has no torch; else makes the scratch folder T (u3d-NAME-*, removed on exit)
# and enters it.
source "$(dirname "${BASH_SOURCE[0]}")/shell_test.sh"
torch_test_setup() {
  BUILD="$(cd "$2" && pwd)"
  PY="${3:-python3}"
  if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "SKIP: no torch in $PY"
    exit 77
  fi
  scratch_folder "$1"
  cd "$T"
}

# Runs scripts/bench/compare.py (one step each, eager: the trainer against the PyTorch network)
# with COMPARE_ARGS; status 1 unless it reports architecture ARCH with equal parameters and FLOPs;
# exits 1 when compare.py itself fails.
#   compare_same_network ARCH COMPARE_ARGS...
compare_same_network() {
  local arch="$1" out
  shift
  out="$("$PY" "$SRC/scripts/bench/compare.py" --trainer "$BUILD/trainer" --python "$PY" --steps 1 --warmup 0 \
    --variants eager "$@" 2>&1)" || { echo "$out" | tail -5; echo "FAIL: compare.py"; exit 1; }
  echo "$out" | grep '"benchmark": "compare"' | ARCH="$arch" "$PY" -c '
import json, os, sys
d = json.load(sys.stdin)
print("compare.py:", {k: d[k] for k in ("architecture", "parameters", "pytorch_parameters", "parameters_equal", "flops_equal")})
sys.exit(0 if d["parameters_equal"] and d["flops_equal"] and d["architecture"] == os.environ["ARCH"] else 1)' ||
    { echo "FAIL: compare.py: not the same network"; return 1; }
}

# Trains one step of a config (TRAIN_ARGS: --config FILE --set ...; the scratch folder's runs/NAME),
# exports its last checkpoint as model.safetensors and checks that pytorch_step.py's network for
# PYTORCH_ARGS (one word list) has the export's parameter and buffer names and shapes
# (tests/python/same_names.py); status 1 when they differ or a step fails.
#   same_names_as_export NAME "PYTORCH_ARGS" TRAIN_ARGS...
same_names_as_export() {
  local name="$1" pyargs="$2"
  shift 2
  "$BUILD/trainer" "$@" --set experiment.name="$name" --set experiment.output_dir="$T/runs" \
    --set training.epochs=1 --set training.steps_per_epoch=1 --set training.val_every=100 \
    --set logging.plot=false --set logging.tensorboard=false > "$name.log" 2>&1 ||
    { tail -5 "$name.log"; echo "FAIL: training $name for its export"; return 1; }
  "$BUILD/trainer" export "$T/runs/$name" --checkpoint last --format safetensors --out "$T/$name-export" \
    > "$name-export.log" 2>&1 || { tail -5 "$name-export.log"; echo "FAIL: trainer export ($name)"; return 1; }
  # shellcheck disable=SC2086
  "$PY" "$SRC/tests/python/same_names.py" "$T/$name-export" $pyargs ||
    { echo "FAIL: $name: pytorch_step.py's network has other names or shapes than the trainer's"; return 1; }
}
