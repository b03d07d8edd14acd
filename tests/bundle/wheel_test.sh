#!/usr/bin/env bash
# ctest bundle.wheel (label integration): scripts/bundle.sh on this build, scripts/wheel.sh on that
# bundle, `pip install` of the wheel into a fresh venv that sees the project's torch (a .pth line to
# the torch venv's site-packages, as a user's environment with torch 2.11 installed), then, in a
# clean environment with only that venv's bin/ on PATH: `trainer` is found on PATH, --version names
# LibTorch 2.11, synth, a one-epoch training of configs/quickstart.yaml from the installed package,
# --predict-only; `pip uninstall` takes `trainer` off PATH again.
#   tests/bundle/wheel_test.sh BUILD_DIR VENV_PYTHON
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
VENV_PY="${2:-}"
[ -n "$VENV_PY" ] && [ -x "$VENV_PY" ] || { echo "SKIP: no torch venv python ($VENV_PY)"; exit 77; }
"$VENV_PY" -c 'import wheel' 2>/dev/null || { echo "SKIP: no 'wheel' package in $VENV_PY (scripts/setup.sh)"; exit 77; }
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder wheel-test

step "scripts/bundle.sh --no-build, scripts/wheel.sh"
tar_path="$(bundle_tarball "$BUILD" "$T/dist")"
whl="$(U3D_TORCH_VENV="$(cd "$(dirname "$VENV_PY")/.." && pwd)" "$SRC/scripts/wheel.sh" --bundle "$tar_path" \
  --out "$T/dist" | tail -n1)"
[ -f "$whl" ] || fail "wheel.sh printed no wheel ($whl)"
case "$(basename "$whl")" in
  unet3d_trainer-*-py3-none-manylinux_2_35_x86_64.whl) ;;
  *) fail "unexpected wheel name $(basename "$whl")" ;;
esac

step "a fresh venv that sees the project's torch"
"$VENV_PY" -m venv "$T/env"
site="$("$T/env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
torch_site="$("$VENV_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$torch_site" > "$site/u3d_torch.pth"
[ ! -e "$T/env/bin/trainer" ] || fail "trainer is in the fresh venv before the install"

step "pip install the wheel (no index, no dependencies fetched)"
"$T/env/bin/python" -m pip install -q --no-index --no-deps "$whl"
CLEAN=(env -i "PATH=$T/env/bin:/usr/bin:/bin" "HOME=$T")
cd "$T"
[ "$("${CLEAN[@]}" bash -c 'command -v trainer')" = "$T/env/bin/trainer" ] || fail "trainer is not on PATH after the install"
step "trainer --version"
"${CLEAN[@]}" trainer --version | tee "$T/version.txt"
grep -q '^LibTorch 2\.11' "$T/version.txt" || fail "--version does not name LibTorch 2.11"
step "synth, one-epoch training, --predict-only from the installed package's config"
cfg_file="$("$T/env/bin/python" -c 'import os, unet3d_trainer as u; print(os.path.join(os.path.dirname(u.__file__), "bundle", "configs", "quickstart.yaml"))')"
[ -f "$cfg_file" ] || fail "the installed package has no configs/quickstart.yaml ($cfg_file)"
"${CLEAN[@]}" trainer synth --task dose --cases 12 --size 16 --seed 0 --out "$T/data.h5"
cfg=(--config "$cfg_file" --set "data.path=$T/data.h5" --set data.patch_size=16 --set training.epochs=1
     --set "experiment.output_dir=$T/runs" --set model.base_filters=4)
"${CLEAN[@]}" trainer "${cfg[@]}" 2>&1 | tail -n 3
ls "$T"/runs/quickstart/checkpoints/epoch_0001.pt >/dev/null || fail "no checkpoint after one epoch"
"${CLEAN[@]}" trainer "${cfg[@]}" --predict-only 2>&1 | tail -n 2
[ -s "$T/runs/quickstart/predictions/val_metrics.csv" ] || fail "--predict-only wrote no val_metrics.csv"

step "pip uninstall"
"$T/env/bin/python" -m pip uninstall -q -y unet3d-trainer
[ ! -e "$T/env/bin/trainer" ] || fail "trainer is still in the venv after pip uninstall"
echo "PASS"
