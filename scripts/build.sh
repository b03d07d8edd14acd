#!/usr/bin/env bash
# Configures (once) and builds a CMake preset: release (default), debug or asan.
#   scripts/build.sh [preset] [target...]     e.g. scripts/build.sh release trainer (no test executables)
#   U3D_UNITY_BUILD=1 scripts/build.sh       a fresh build folder configured as a unity build (eight
#                                             sources per compiler run: about a third of the compile
#                                             time, but an edit recompiles its batch); CI sets it (.ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${1:-release}"
shift || true
VENV="${U3D_TORCH_VENV:-$HOME/.cache/unet3d-trainer/torch-2.11.0}"
# scripts/setup.sh --offline as non-root unpacks the Debian packages into this prefix.
PREFIX="${U3D_PREFIX:-$HOME/.cache/unet3d-trainer/prefix}"
if [ -d "$PREFIX/usr" ]; then
  export PATH="$PREFIX/usr/bin:$PATH"
  export CMAKE_PREFIX_PATH="$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$PREFIX/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$PREFIX/usr/lib/$(uname -m)-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$PREFIX/usr/lib/$(uname -m)-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ ! -f "build/$PRESET/build.ninja" ]; then
  torch=()
  if [ -n "${U3D_TORCH_PYTHON:-}" ]; then   # an installed PyTorch instead of the venv (scripts/setup.sh)
    torch=(-DTorch_DIR="$("$U3D_TORCH_PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch")
  fi
  unity=()
  if [ "${U3D_UNITY_BUILD:-0}" = 1 ]; then unity=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8); fi
  cmake --preset "$PRESET" -DU3D_TORCH_VENV="$VENV" "${torch[@]}" "${unity[@]}" >/dev/null
fi
if [ $# -gt 0 ]; then
  cmake --build --preset "$PRESET" --target "$@"
else
  cmake --build --preset "$PRESET"
fi
