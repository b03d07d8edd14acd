#!/usr/bin/env bash
# ctest bundle.portable (label integration): scripts/bundle.sh on this build, unpacked into an
# empty folder and run with a clean environment (env -i, only PATH to the torch venv's python, or
# only U3D_LIBTORCH): --version, synth, a one-epoch training, --predict-only; no build-machine path
# in any binary; the bundle, the working tree and the OpenKBP sample under the 64 MiB a lent GPU box
# is sent; a wrong LibTorch version (fake folder, fake torch package) gives one line, exit 2.
#   tests/bundle/bundle_test.sh BUILD_DIR TORCH_LIB_DIR [VENV_PYTHON]
set -euo pipefail
BUILD="$(cd "$1" && pwd)"
TORCH_LIB="$2"
VENV_PY="${3:-}"
source "$(dirname "$0")/../support/shell_test.sh"
scratch_folder bundle-test

step "scripts/bundle.sh --no-build"
tar_path="$(bundle_tarball "$BUILD" "$T/dist")"
[ -f "$tar_path" ] || fail "bundle.sh printed no tarball ($tar_path)"
size=$(stat -c %s "$tar_path")
echo "bundle: $(basename "$tar_path"), $size bytes ($((size / 1024 / 1024)) MiB)"
[ "$size" -lt $((64 * 1024 * 1024)) ] || fail "bundle is $size bytes, not under 64 MiB"
# What a lent GPU box is sent (docs/install.md, "The first check on a lent GPU box"): the bundle, the
# working tree and the OpenKBP sample of gpu-check's workflow sections, together at most 64 MiB.
tree=$(git -C "$SRC" ls-files -z 2>/dev/null | (cd "$SRC" && xargs -0 -r stat -c %s 2>/dev/null) |
       awk '{ s += $1 } END { print s + 0 }')
sample="$SRC/../shared/data/openkbp-sample.tar.xz"
sample_size=$([ -f "$sample" ] && stat -L -c %s "$sample" || echo 0)
travel=$((size + tree + sample_size))
echo "to a GPU box: bundle $size + working tree $tree + OpenKBP sample $sample_size = $travel bytes" \
     "($((travel / 1024 / 1024)) MiB of 64)"
[ "$travel" -lt $((64 * 1024 * 1024)) ] || fail "bundle, working tree and sample are $travel bytes, over 64 MiB"

step "unpack into an empty folder"
mkdir "$T/box"
start=$(date +%s.%N)
tar -xzf "$tar_path" -C "$T/box"
B="$(echo "$T"/box/unet3d-trainer-*)"
[ -x "$B/bin/trainer" ] || fail "no bin/trainer in the bundle"

if [ -n "$VENV_PY" ]; then
  CLEAN=(env -i "PATH=$(dirname "$VENV_PY"):/usr/bin:/bin" "HOME=$T")
  how="PATH to $(dirname "$VENV_PY")"
else
  CLEAN=(env -i "PATH=/usr/bin:/bin" "HOME=$T" "U3D_LIBTORCH=$TORCH_LIB")
  how="U3D_LIBTORCH=$TORCH_LIB"
fi
cd "$T"
step "clean environment ($how): --version"
"${CLEAN[@]}" "$B/bin/trainer" --version | tee "$T/version.txt"
grep -q '^LibTorch 2\.11' "$T/version.txt" || fail "--version does not name LibTorch 2.11"
step "synth"
"${CLEAN[@]}" "$B/bin/trainer" synth --task dose --cases 12 --size 16 --seed 0 --out "$T/data.h5"
step "one-epoch training"
cfg=(--config "$B/configs/quickstart.yaml" --set "data.path=$T/data.h5" --set data.patch_size=16
     --set training.epochs=1 --set "experiment.output_dir=$T/runs" --set model.base_filters=4)
"${CLEAN[@]}" "$B/bin/trainer" "${cfg[@]}" 2>&1 | tee "$T/train.log" | tail -n 3
end=$(date +%s.%N)
ls "$T"/runs/quickstart/checkpoints/epoch_0001.pt >/dev/null || fail "no checkpoint after one epoch"
echo "unpack to the end of a one-epoch training: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s"
step "--predict-only"
"${CLEAN[@]}" "$B/bin/trainer" "${cfg[@]}" --predict-only 2>&1 | tail -n 2
[ -s "$T/runs/quickstart/predictions/val_metrics.csv" ] || fail "--predict-only wrote no val_metrics.csv"

step "U3D_LIBTORCH alone (no python on PATH that has torch)"
env -i PATH=/usr/bin:/bin HOME="$T" U3D_LIBTORCH="$TORCH_LIB" "$B/bin/trainer" --version >/dev/null \
  || fail "bin/trainer --version with U3D_LIBTORCH=$TORCH_LIB failed"

step "RUNPATH and no build-machine path"
for f in "$B"/libexec/trainer "$B"/libexec/tests/*; do
  rp="$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  case "$rp" in '$ORIGIN/../lib'|'$ORIGIN/../../lib') ;; *) fail "$f: RUNPATH '$rp'" ;; esac
done
for p in "$SRC" "$BUILD" "$(cd "$TORCH_LIB/.." && pwd -P)" ${VENV_PY:+"$(cd "$(dirname "$VENV_PY")/.." && pwd)"}; do
  if grep -rlaF "$p" "$B/libexec" "$B/lib" "$B/bin"; then fail "build-machine path $p in the files above"; fi
  for f in "$B"/libexec/trainer "$B"/libexec/tests/*; do
    if strings "$f" | grep -qF "$p"; then fail "strings $f shows $p"; fi
  done
done
[ -n "$(ls "$B/lib")" ] || fail "lib/ is empty"

step "wrong LibTorch version: one line, exit 2"
mkdir -p "$T/fake/torch/lib"
touch "$T/fake/torch/lib/libtorch.so" "$T/fake/torch/__init__.py"
printf "from typing import Optional\n__version__ = '2.10.0+cu130'\ncuda: Optional[str] = '13.0'\n" > "$T/fake/torch/version.py"
expect_2() {
  local rc=0
  "$@" > "$T/out.txt" 2> "$T/err.txt" || rc=$?
  cat "$T/err.txt"
  [ "$rc" = 2 ] || fail "exit $rc, expected 2: $*"
  [ "$(wc -l < "$T/err.txt")" = 1 ] || fail "expected one line on stderr"
  grep -q '2\.10\.0' "$T/err.txt" && grep -q '2\.11' "$T/err.txt" || fail "the line must name 2.10.0 and 2.11"
}
expect_2 env -i PATH=/usr/bin:/bin U3D_LIBTORCH="$T/fake/torch/lib" "$B/bin/trainer" --version
if [ -n "$VENV_PY" ]; then
  expect_2 env -i "PATH=$(dirname "$VENV_PY"):/usr/bin:/bin" PYTHONPATH="$T/fake" "$B/bin/trainer" --version
fi
if [ -n "$VENV_PY" ]; then
  step "scripts/gpu-check.sh --quick from the bundle, clean environment"
  rc=0
  "${CLEAN[@]}" "$B/scripts/gpu-check.sh" --quick --out "$T/gpu-check" > "$T/gpu-check.log" 2>&1 || rc=$?
  tail -n 3 "$T/gpu-check.log"
  [ -s "$T/gpu-check/gpu-report.md" ] && [ -s "$T/gpu-check/gpu-report.json" ] || fail "gpu-check wrote no reports"
  [ "$rc" = 0 ] || { cat "$T/gpu-check/gpu-report.md"; fail "gpu-check from the bundle exit $rc"; }
  grep -q '"layout": "bundle"' "$T/gpu-check/gpu-report.json" || fail "gpu-check did not run in bundle layout"
fi
echo "PASS"
