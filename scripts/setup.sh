#!/usr/bin/env bash
# Installs what is missing, and nothing else: Debian packages (with sudo only when not root and
# only when a package is missing) and LibTorch from the PyPI torch wheel, pinned, in a virtual
# environment outside the clone (reused by every clone on this machine).
#
#   scripts/setup.sh            # prints the LibTorch CMake prefix on its last line
#   U3D_TORCH_VENV=/opt/torch scripts/setup.sh
set -euo pipefail

TORCH_VERSION=2.11.0
VENV="${U3D_TORCH_VENV:-$HOME/.cache/unet3d-trainer/torch-$TORCH_VERSION}"
PACKAGES=(cmake ninja-build g++ ccache pkg-config python3 python3-venv
          libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libhdf5-dev libnifti2-dev libgtest-dev libgmock-dev)

log() { echo "[setup] $*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

torch_ok() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$TORCH_VERSION" 2>/dev/null <<'PY'
import sys, torch
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
}
if ! torch_ok; then
  log "installing torch==$TORCH_VERSION (LibTorch, CUDA 13.0 build) into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q --no-cache-dir "torch==$TORCH_VERSION"
  torch_ok || { log "torch $TORCH_VERSION did not install into $VENV"; exit 1; }
fi
"$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null
