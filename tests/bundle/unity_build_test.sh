#!/usr/bin/env bash
# ctest build.unity (label slow): the library and `trainer` compile as a unity build (CMake preset
# quick, what scripts/quickstart.sh builds): sources of one room share a compiler run, so two files
# that each define the same name in an anonymous namespace break it. Built in a temporary folder
# (ccache as configured) without optimisation or debug information (-O0 -g0: a clash is a front-end
# error, and the optimiser and debug information are most of a build's time).
# SELF_IS_UNITY 1: the build running this test is itself such a unity build (CI's, .ci/run), which
# compiled every source this way already: skipped (exit 77), saying so.
#   tests/bundle/unity_build_test.sh SOURCE_DIR TORCH_VENV [SELF_IS_UNITY]
set -euo pipefail
source "$(dirname "$0")/../support/shell_test.sh"
if [ "${3:-0}" = 1 ]; then
  echo "SKIP: this build is itself a unity build of eight sources per compiler run: every source compiled that way"
  exit 77
fi
VENV="${2:-}"
need_venv "$VENV"
scratch_folder unity-build
cmake -S "$SRC" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0" \
  -DU3D_TORCH_VENV="$VENV" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 > "$T/configure.log" 2>&1 ||
  { cat "$T/configure.log"; echo "FAIL: configure"; exit 1; }
rc=0
ninja -C "$T/build" trainer > "$T/build.log" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  grep -B2 -A6 "error:" "$T/build.log" | head -60
  echo "FAIL: the unity build (preset quick) does not compile: exit $rc; rename the clashing helpers or share one"
  exit 1
fi
"$T/build/trainer" --version
echo "PASS: the unity build compiles and runs"
