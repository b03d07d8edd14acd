#!/usr/bin/env bash
# ctest configure.without_system_cuda (label integration): a fresh CMake configure of this source tree
# with every system CUDA toolkit hidden succeeds, without warnings, on the CUDA 13.0 compiler and
# headers that scripts/setup.sh installs from PyPI into the torch venv (cmake/U3dTorch.cmake), and the
# project's CUDA kernels (src/kernels/*.cu, cmake/U3dKernels.cmake) compile with that compiler. Hidden
# in a private mount namespace: /usr/local/cuda* and /usr/lib/nvidia-cuda-toolkit covered by empty
# folders, each nvcc on PATH (and /usr/local/bin, /usr/bin) by /dev/null, CUDA_HOME, CUDA_PATH,
# CUDACXX and CUDAToolkit_ROOT unset. Skipped (77) where no mount namespace can be made (not root).
#   tests/bundle/configure_no_cuda_test.sh SOURCE_DIR TORCH_VENV
set -euo pipefail
source "$(dirname "$0")/../support/shell_test.sh"
VENV="${2:-}"
need_venv "$VENV"
if ! ls "$VENV"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc > /dev/null 2>&1; then
  echo "FAIL: no nvcc from PyPI in $VENV (scripts/setup.sh installs nvidia-cuda-nvcc there)"
  exit 1
fi
unshare -m --propagation private true 2> /dev/null || { echo "SKIP: no private mount namespace here (needs root)"; exit 77; }
scratch_folder configure-no-cuda
cat > "$T/hidden.sh" << 'SH'
set -eu
for d in /usr/local/cuda* /usr/lib/nvidia-cuda-toolkit; do
  if [ -d "$d" ] && [ ! -L "$d" ]; then mount -t tmpfs none "$d"; fi
done
for p in $(echo "$PATH" | tr ':' ' ') /usr/local/bin /usr/bin; do
  if [ -f "$p/nvcc" ]; then mount --bind /dev/null "$p/nvcc"; fi
done
if command -v nvcc > /dev/null 2>&1 && [ -x "$(command -v nvcc)" ]; then
  echo "FAIL: nvcc still found at $(command -v nvcc) after hiding"
  exit 1
fi
exec env -u CUDA_HOME -u CUDA_PATH -u CUDACXX -u CUDAToolkit_ROOT "$@"
SH
rc=0
unshare -m --propagation private bash "$T/hidden.sh" cmake -S "$SRC" -B "$T/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DU3D_TORCH_VENV="$VENV" > "$T/log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/log"; echo "FAIL: configure without a system CUDA toolkit: exit $rc"; exit 1; }
if grep -n -A8 "CMake Warning" "$T/log"; then
  echo "FAIL: the configure printed the warnings above"
  exit 1
fi
grep -q "using the CUDA compiler and headers from PyPI" "$T/log" || { cat "$T/log"; echo "FAIL: PyPI's CUDA not used"; exit 1; }
grep "^CMAKE_CUDA_COMPILER:" "$T/build/CMakeCache.txt"
# The project's own kernels (kernels/) compile with that nvcc too, for every target architecture.
grep -q "u3d: CUDA kernels (kernels/) for sm_80 sm_90 sm_100" "$T/log" || { cat "$T/log"; echo "FAIL: no CUDA kernels configured"; exit 1; }
rc=0
unshare -m --propagation private bash "$T/hidden.sh" cmake --build "$T/build" --target u3d_kernels > "$T/build.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -30 "$T/build.log"; echo "FAIL: the CUDA kernels do not compile with PyPI's nvcc: exit $rc"; exit 1; }
echo "PASS: configured without a system CUDA toolkit, on the venv's PyPI CUDA compiler, and compiled kernels/ with it"
