#!/usr/bin/env bash
# Puts `trainer` where a shell finds it: a symbolic link PREFIX/bin/trainer to this checkout's
# build (build/release/trainer; U3D_BUILD_DIR another build folder), so a rebuild is picked up
# without installing again. Default PREFIX: ~/.local (Debian's and Ubuntu's ~/.profile put
# ~/.local/bin on PATH when it exists). Prints the PATH line to add when PREFIX/bin is not on PATH.
#
#   scripts/install.sh [--prefix DIR]
#
# Refuses (exit 1, one line) to replace a PREFIX/bin/trainer that is not a link made by this script
# (a file, or a link to another program): nothing of the user's is overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PREFIX="$HOME/.local"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a folder" >&2; exit 2; }; PREFIX="$2"; shift ;;
    *) echo "install.sh: unknown argument '$1'; expected --prefix DIR" >&2; exit 2 ;;
  esac
  shift
done
BUILD="${U3D_BUILD_DIR:-$ROOT/build/release}"
[ -x "$BUILD/trainer" ] || { echo "install.sh: $BUILD/trainer is not built; run scripts/build.sh release trainer" >&2; exit 1; }
target="$(cd "$BUILD" && pwd)/trainer"
bin="$PREFIX/bin"
link="$bin/trainer"
if [ -e "$link" ] || [ -L "$link" ]; then
  if [ ! -L "$link" ]; then
    echo "install.sh: $link exists and is not a link (another trainer?); remove it or give --prefix DIR" >&2
    exit 1
  fi
  old="$(readlink "$link")"
  case "$old" in
    */build/*/trainer) ;;  # a link this script made (this or another checkout): replaced
    *) echo "install.sh: $link links to $old, not to a unet3d-trainer build; remove it or give --prefix DIR" >&2
       exit 1 ;;
  esac
fi
mkdir -p "$bin"
ln -sfn "$target" "$link"
echo "[install] $link -> $target"
case ":$PATH:" in
  *":$bin:"*) echo "[install] $bin is on PATH: run 'trainer --help'" ;;
  *) echo "[install] $bin is not on PATH in this shell; add it (e.g. to ~/.bashrc):"
     echo "    export PATH=\"$bin:\$PATH\"" ;;
esac
