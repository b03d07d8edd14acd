#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite with ctest.
#   scripts/test.sh                 # every label: unit, integration, fault, gpu (skips without CUDA), slow
#   scripts/test.sh -L unit         # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
scripts/build.sh release
ctest --preset release -j "$(nproc)" "$@"
