#!/usr/bin/env bash
# gpu-check: proves on any machine that every GPU path of trainer works and measures how fast,
# against PyTorch on the same GPU; on a machine without CUDA it runs every CPU part and marks each
# GPU section SKIPPED with the reason.
#   scripts/gpu-check.sh [--out DIR] [--quick] [--openkbp DIR|openkbp-sample.tar.xz] [--minutes M]
# Writes DIR/gpu-report.md and DIR/gpu-report.json. Runs from the release bundle or a build tree
# (build/release, or U3D_BUILD_DIR). Needs python3 (standard library; torch for the PyTorch side:
# U3D_PYTHON names another Python). Exit 0: nothing failed; 1: a section FAILed; 2: bad arguments.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
py="${U3D_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "gpu-check: needs python3 on PATH (or U3D_PYTHON); found none" >&2; exit 2; }
exec "$py" "$here/bench/gpu_check.py" "$@"
