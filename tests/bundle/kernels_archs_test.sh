#!/usr/bin/env bash
# ctest kernels.architectures (label unit): the archive of the project's CUDA kernels (u3d_kernels,
# cmake/U3dKernels.cmake) holds machine code for sm_80, sm_90 and sm_100 and compute_100 PTX for the
# GPUs after them, read with cuobjdump (no GPU needed).
#   tests/bundle/kernels_archs_test.sh CUOBJDUMP ARCHIVE
set -euo pipefail
CUOBJDUMP="$1"
ARCHIVE="$2"
[ -x "$CUOBJDUMP" ] || { echo "FAIL: no cuobjdump found (CUDA toolkit or the torch venv's triton): '$CUOBJDUMP'"; exit 1; }
[ -f "$ARCHIVE" ] || { echo "FAIL: no kernel archive at $ARCHIVE"; exit 1; }
elf=$("$CUOBJDUMP" --list-elf "$ARCHIVE")
ptx=$("$CUOBJDUMP" --list-ptx "$ARCHIVE")
echo "$elf"
echo "$ptx"
for arch in sm_80 sm_90 sm_100; do
  echo "$elf" | grep -q "\.$arch\." || { echo "FAIL: no $arch machine code in $ARCHIVE"; exit 1; }
done
echo "$ptx" | grep -q "sm_100\.ptx" || { echo "FAIL: no PTX for compute_100 in $ARCHIVE"; exit 1; }
echo "PASS: sm_80, sm_90, sm_100 and compute_100 PTX in $(basename "$ARCHIVE")"
