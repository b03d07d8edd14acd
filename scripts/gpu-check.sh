#!/usr/bin/env bash
# gpu-check: the figures that matter from a GPU box, in the order of their value, inside a hard time
# limit, in a report folder that holds what finished even when the check is killed.
#   scripts/gpu-check.sh [--deadline SECONDS] [--report DIR] [--work DIR] [--only SECTIONS]
#                        [--openkbp DIR|openkbp-sample.tar.xz] [--minutes M] [--quick] [--plan]
# DIR gets gpu-report.md, gpu-report.json and logs.tar.gz (nothing else), rewritten after every
# command; work files go to --work (default under /tmp). Without CUDA every GPU section is SKIPPED
# with the reason and the CPU rehearsals run. Runs from the release bundle or a build tree
# (build/release, or U3D_BUILD_DIR). Needs python3 (standard library; torch for the PyTorch side:
# U3D_PYTHON names another Python). Exit 0: nothing failed; 1: a section FAILed; 2: bad arguments.
# Sections and flags: scripts/bench/gpu_check.py; docs/install.md, "gpu-check".
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
py="${U3D_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "gpu-check: needs python3 on PATH (or U3D_PYTHON); found none" >&2; exit 2; }
exec "$py" "$here/bench/gpu_check.py" "$@"
