#!/usr/bin/env bash
# ctest configure.quiet (label integration): a fresh CMake configure of this source tree, with the
# LibTorch of this build's venv, prints no "CMake Warning" (LibTorch's own config used to print two,
# with call stacks: CMAKE_CUDA_ARCHITECTURES and kineto; cmake/U3dTorch.cmake answers both).
#   tests/bundle/configure_test.sh SOURCE_DIR TORCH_VENV
set -euo pipefail
source "$(dirname "$0")/../support/shell_test.sh"
VENV="${2:-}"
need_venv "$VENV"
scratch_folder configure-test
rc=0
cmake -S "$SRC" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DU3D_TORCH_VENV="$VENV" > "$T/log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/log"; echo "FAIL: configure exit $rc"; exit 1; }
if grep -n -A8 "CMake Warning" "$T/log"; then
  echo "FAIL: the configure printed the warnings above"
  exit 1
fi
echo "PASS: configured without warnings ($(grep -c . "$T/log") lines of output)"
