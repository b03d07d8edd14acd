#!/usr/bin/env bash
# Configures (once) and builds a CMake preset: release (default), debug or asan.
#   scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-release}"
VENV="${U3D_TORCH_VENV:-$HOME/.cache/unet3d-trainer/torch-2.11.0}"
if [ ! -f "build/$PRESET/build.ninja" ]; then
  cmake --preset "$PRESET" -DU3D_TORCH_VENV="$VENV" >/dev/null
fi
cmake --build --preset "$PRESET"
