#!/usr/bin/env bash
# Packs the release bundle (scripts/bundle.sh) as a Python wheel, so that
#   pip install unet3d_trainer-<version>-py3-none-manylinux_2_35_x86_64.whl
# puts `trainer` on PATH in that environment and runs it on the environment's own PyTorch 2.11
# (the bundle's launcher, with U3D_PYTHON = the environment's python). Nothing is compiled here.
#
#   scripts/wheel.sh [--bundle FILE.tar.gz] [--out DIR]     (default: dist/'s bundle, dist/)
#
# Layout of the wheel: unet3d_trainer/__init__.py, unet3d_trainer/__main__.py (the console script
# `trainer`: execs bundle/bin/trainer), unet3d_trainer/bundle/ (the unpacked bundle: bin/, libexec/,
# lib/, configs/, scripts/, docs/, share/), and the .dist-info (METADATA requires torch 2.11.*;
# the tag is manylinux_2_35_x86_64: the bundle needs glibc 2.35). Packed by the `wheel` package
# (`python -m wheel pack`: RECORD and hashes), installed by scripts/setup.sh into the torch venv.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="$ROOT/dist"
BUNDLE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    *) echo "wheel.sh: unknown argument '$1'; expected --bundle FILE.tar.gz or --out DIR" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "[wheel] $*" >&2; }
fail() { echo "[wheel] error: $*" >&2; exit 1; }

if [ -z "$BUNDLE" ]; then
  BUNDLE="$(ls -t "$ROOT"/dist/unet3d-trainer-*-linux-x86_64.tar.gz 2>/dev/null | head -n1 || true)"
  [ -n "$BUNDLE" ] || fail "no bundle in dist/: run scripts/bundle.sh first, or give --bundle FILE.tar.gz"
fi
[ -f "$BUNDLE" ] || fail "$BUNDLE: no such bundle (scripts/bundle.sh writes one)"
PY="${U3D_TORCH_VENV:-$HOME/.cache/unet3d-trainer/torch-2.11.0}/bin/python"
[ -x "$PY" ] || PY=python3
"$PY" -c 'import wheel' 2>/dev/null || fail "$PY has no 'wheel' package: run scripts/setup.sh (or pip install wheel)"

T="$(mktemp -d "${TMPDIR:-/tmp}/u3d-wheel-XXXXXX")"
trap 'rm -rf "$T"' EXIT
tar -xzf "$BUNDLE" -C "$T"
src="$(echo "$T"/unet3d-trainer-*)"
[ -d "$src" ] && [ -f "$src/share/unet3d-trainer/bundle.env" ] || fail "$BUNDLE is not a release bundle"
# shellcheck source=/dev/null
. "$src/share/unet3d-trainer/bundle.env"   # U3D_BUNDLE_VERSION, U3D_BUNDLE_TORCH, U3D_BUNDLE_COMMIT
version="$U3D_BUNDLE_VERSION"
torch_minor="${U3D_BUNDLE_TORCH%.*}"
tag="py3-none-manylinux_2_35_x86_64"
name="unet3d_trainer-$version"
pkg="$T/$name/unet3d_trainer"
mkdir -p "$pkg"
mv "$src" "$pkg/bundle"

cat > "$pkg/__init__.py" <<EOF
"""unet3d-trainer $version (commit ${U3D_BUNDLE_COMMIT:-unknown}): the release bundle as a wheel.
The \`trainer\` command runs bundle/bin/trainer on this environment's PyTorch $torch_minor."""
__version__ = "$version"
EOF
cat > "$pkg/__main__.py" <<'EOF'
"""The `trainer` console script: runs the bundle's launcher (bundle/bin/trainer), which finds and
checks this environment's PyTorch (U3D_PYTHON = this interpreter) and runs the real binary."""
import os
import sys


def main():
    launcher = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bundle", "bin", "trainer")
    os.environ.setdefault("U3D_PYTHON", sys.executable)
    os.execv(launcher, [launcher] + sys.argv[1:])


if __name__ == "__main__":
    main()
EOF
info="$T/$name/$name.dist-info"
mkdir -p "$info"
cat > "$info/METADATA" <<EOF
Metadata-Version: 2.1
Name: unet3d-trainer
Version: $version
Summary: Trains 3D and 2D U-Nets fast (dose prediction, segmentation) on the installed PyTorch
License: see unet3d_trainer/bundle/LICENSE
Requires-Python: >=3.9
Requires-Dist: torch==$torch_minor.*
EOF
cat > "$info/WHEEL" <<EOF
Wheel-Version: 1.0
Generator: unet3d-trainer scripts/wheel.sh
Root-Is-Purelib: false
Tag: $tag
EOF
cat > "$info/entry_points.txt" <<'EOF'
[console_scripts]
trainer = unet3d_trainer.__main__:main
EOF
mkdir -p "$OUT"
"$PY" -m wheel pack --dest-dir "$OUT" "$T/$name" >&2
whl="$OUT/$name-$tag.whl"
[ -f "$whl" ] || fail "wheel pack wrote no $whl"
log "$(basename "$whl"): $(stat -c %s "$whl") bytes, from $(basename "$BUNDLE")"
echo "$whl"
