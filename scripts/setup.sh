#!/usr/bin/env bash
# Installs what is missing, and nothing else: Debian packages (with sudo only when not root and
# only when a package is missing) and LibTorch from the PyPI torch wheel, pinned, in a virtual
# environment outside the clone (reused by every clone on this machine).
#
#   scripts/setup.sh                     # prints the LibTorch CMake prefix on its last line
#   U3D_TORCH_VENV=/opt/torch scripts/setup.sh
#   U3D_TORCH_PYTHON=python3 scripts/setup.sh   # use that Python's torch (2.11.x), download none
#
# Air-gapped machines:
#   scripts/setup.sh --download DIR      # on a machine with network and the same Debian/Ubuntu
#                                        # release: DIR/debs/ gets the packages below and every
#                                        # package they depend on (apt-get download)
#   scripts/setup.sh --offline DIR       # on the air-gapped one: installs the missing packages
#                                        # from DIR/debs/ (root: apt-get install of the local .deb
#                                        # files; otherwise dpkg -x into U3D_PREFIX, default
#                                        # ~/.cache/unet3d-trainer/prefix, which scripts/build.sh
#                                        # then uses); LibTorch from U3D_TORCH_PYTHON, or from
#                                        # wheels in DIR/wheels/ (pip download torch==2.11.0 -d DIR/wheels)
set -euo pipefail

TORCH_VERSION=2.11.0
VENV="${U3D_TORCH_VENV:-$HOME/.cache/unet3d-trainer/torch-$TORCH_VERSION}"
PREFIX="${U3D_PREFIX:-$HOME/.cache/unet3d-trainer/prefix}"
PACKAGES=(cmake ninja-build g++ ccache pkg-config python3 python3-venv
          libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev libhdf5-dev libssl-dev libnifti2-dev libtiff-dev libgloo-dev libgtest-dev libgmock-dev
          nlohmann-json3-dev
          libdcmtk-dev libopenjp2-7-dev
          libcairo2-dev libpng-dev fonts-dejavu-core)

log() { echo "[setup] $*" >&2; }
die() { echo "[setup] error: $1" >&2; exit "${2:-1}"; }

MODE=online DIR=""
case "${1:-}" in
  "") ;;
  --download|--offline)
    [ $# -eq 2 ] || die "$1 needs a folder: scripts/setup.sh $1 DIR" 2
    MODE="${1#--}"; DIR="$2" ;;
  *) die "unknown argument '$1'; expected --download DIR or --offline DIR" 2 ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

if [ "$MODE" = download ]; then
  mkdir -p "$DIR/debs"
  # The whole dependency closure (the target machine may lack any of it); virtual names dropped.
  mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
                           --no-breaks --no-replaces --no-enhances "${PACKAGES[@]}" | grep -E '^[a-z0-9]' | sort -u)
  log "downloading ${#closure[@]} Debian packages into $DIR/debs"
  (cd "$DIR/debs" && apt-get download "${closure[@]}" >/dev/null)
  . /etc/os-release
  echo "$PRETTY_NAME $(dpkg --print-architecture)" > "$DIR/debs/RELEASE"
  log "done: copy $DIR to the offline machine (same release: $PRETTY_NAME) and run scripts/setup.sh --offline DIR"
  log "LibTorch there: U3D_TORCH_PYTHON=python3 (an installed torch $TORCH_VERSION), or wheels: pip download torch==$TORCH_VERSION tensorboard==2.21.0 safetensors==0.8.0 onnx==1.23.2 onnxscript==0.7.2 pydicom==3.0.2 rt-utils==1.2.7 highdicom==0.28.2 pillow==11.3.0 tifffile==2025.6.11 nibabel==5.4.2 wheel==0.45.1 nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-cudnn-frontend==1.32.0 -d $DIR/wheels"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ] && [ "$MODE" = online ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
elif [ ${#missing[@]} -gt 0 ]; then
  [ -d "$DIR/debs" ] || die "--offline $DIR: no $DIR/debs folder (make it with scripts/setup.sh --download $DIR)" 2
  # Every package of the closure that this machine lacks, as local .deb files.
  debs=()
  for f in "$DIR"/debs/*.deb; do
    name="$(dpkg-deb -f "$f" Package)"
    installed "$name" || debs+=("$f")
  done
  [ ${#debs[@]} -gt 0 ] || die "--offline $DIR: missing ${missing[*]} but $DIR/debs has none of them" 1
  if [ "$(id -u)" -eq 0 ]; then
    log "installing ${#debs[@]} local packages from $DIR/debs (for ${missing[*]})"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-download --no-install-recommends \
      $(printf '%s\n' "${debs[@]}" | sed 's|^\([^/]\)|./\1|')
  else
    log "not root: unpacking ${#debs[@]} packages into $PREFIX (dpkg -x; scripts/build.sh uses it)"
    mkdir -p "$PREFIX"
    for f in "${debs[@]}"; do dpkg -x "$f" "$PREFIX"; done
  fi
fi

torch_ok() {
  "$1" - "$TORCH_VERSION" 2>/dev/null <<'PY'
import sys, torch
want = sys.argv[1].rsplit(".", 1)[0]
sys.exit(0 if torch.__version__.split("+")[0].rsplit(".", 1)[0] == want else 1)
PY
}
if [ -n "${U3D_TORCH_PYTHON:-}" ]; then
  py="$(command -v "$U3D_TORCH_PYTHON")" || die "U3D_TORCH_PYTHON=$U3D_TORCH_PYTHON: no such Python" 2
  torch_ok "$py" || die "U3D_TORCH_PYTHON=$py has no torch ${TORCH_VERSION%.*}.x (import torch failed or another version)" 2
  "$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null
  exit 0
fi
if ! { [ -x "$VENV/bin/python" ] && torch_ok "$VENV/bin/python"; }; then
  pip_src=()
  if [ "$MODE" = offline ]; then
    [ -d "$DIR/wheels" ] || die "--offline $DIR: no torch; set U3D_TORCH_PYTHON=python3 (an installed torch $TORCH_VERSION) or put wheels in $DIR/wheels" 2
    pip_src=(--no-index --find-links "$DIR/wheels")
  fi
  log "installing torch==$TORCH_VERSION (LibTorch, CUDA 13.0 build) into $VENV"
  python3 -m venv "$VENV"
  [ "$MODE" = offline ] || "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q --no-cache-dir "${pip_src[@]}" "torch==$TORCH_VERSION"
  torch_ok "$VENV/bin/python" || die "torch $TORCH_VERSION did not install into $VENV"
fi
# What the tests read the run's views and exports with (tests/integration/watch_and_export_test.sh,
# scripts/python/): TensorBoard's reader, safetensors, ONNX and its exporter's onnxscript.
# The DICOM tests (tests/python/write_dicom.py) write their files with pydicom, rt-utils and highdicom
# (DICOM SEG); the 2D image
# tests (tests/python/write_slices.py) their PNG and TIFF slices with Pillow and tifffile; the golden
# nnU-Net plans' phantoms (tests/python/nnunet_phantoms.py) are NIfTI written by nibabel.
PY_PACKAGES=(tensorboard==2.21.0 safetensors==0.8.0 onnx==1.23.2 onnxscript==0.7.2 pydicom==3.0.2 rt-utils==1.2.7
  highdicom==0.28.2 pillow==11.3.0 tifffile==2025.6.11 nibabel==5.4.2)
if ! "$VENV/bin/python" -c "import tensorboard, safetensors, onnx, onnxscript, pydicom, rt_utils, highdicom, PIL, tifffile, nibabel" 2>/dev/null; then
  pip_src=()
  if [ "$MODE" = offline ]; then pip_src=(--no-index --find-links "$DIR/wheels"); fi
  log "installing ${PY_PACKAGES[*]} into $VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir "${pip_src[@]}" "${PY_PACKAGES[@]}" ||
    die "pip install ${PY_PACKAGES[*]} into $VENV failed"
fi
# scripts/wheel.sh packs the release bundle as a Python wheel with the `wheel` package (`wheel pack`).
if ! "$VENV/bin/python" -c "import wheel" 2>/dev/null; then
  pip_src=()
  if [ "$MODE" = offline ]; then pip_src=(--no-index --find-links "$DIR/wheels"); fi
  log "installing wheel==0.45.1 into $VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir "${pip_src[@]}" wheel==0.45.1 ||
    die "pip install wheel==0.45.1 into $VENV failed"
fi
# The CUDA 13.0 compiler and headers from PyPI (nvcc with its front end, NVVM and CCCL: about 100 MB
# of wheels) beside the CUDA libraries torch brought, so that LibTorch's CMake config, which asks for a
# CUDA toolkit, configures on a machine without one: cmake/U3dTorch.cmake uses a system toolkit when it
# finds one, else this one. nvcc links from lib64/ and CMake looks for unversioned libraries: both linked.
CUDA_WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85)
cu13() { "$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null; }
CU13="$(cu13 || true)"
if [ -z "$CU13" ] || [ ! -x "$CU13/bin/nvcc" ]; then
  pip_src=()
  if [ "$MODE" = offline ]; then pip_src=(--no-index --find-links "$DIR/wheels"); fi
  log "installing the CUDA 13.0 compiler from PyPI (${CUDA_WHEELS[*]}) into $VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir --no-deps "${pip_src[@]}" "${CUDA_WHEELS[@]}" ||
    die "pip install ${CUDA_WHEELS[*]} into $VENV failed"
  CU13="$(cu13 || true)"
  [ -n "$CU13" ] && [ -x "$CU13/bin/nvcc" ] || die "no nvcc in $VENV after installing ${CUDA_WHEELS[*]}"
fi
[ -e "$CU13/lib64" ] || ln -s lib "$CU13/lib64"
for f in "$CU13"/lib/lib*.so.*; do
  b="${f%%.so.*}.so"
  [ -e "$b" ] || ln -s "$(basename "$f")" "$b"
done
# cuDNN's graph API through NVIDIA's header-only cudnn-frontend, for `trainer bench-norm`'s cuDNN
# column (cuDNN's fused norm + ReLU beside the project's kernels, kernels/cudnn_norm_act.h): the wheel's
# include/ lands in the venv's site-packages; only its headers are used (compiled in, cuDNN itself is
# torch's, loaded at run time). cmake/U3dKernels.cmake builds without that column when they are missing.
CUDNN_FRONTEND_WHEEL=nvidia-cudnn-frontend==1.32.0
cudnn_frontend_h() { "$VENV/bin/python" -c 'import sysconfig, os; p = os.path.join(sysconfig.get_paths()["purelib"], "include", "cudnn_frontend.h"); print(p if os.path.exists(p) else "")' 2>/dev/null; }
if [ -z "$(cudnn_frontend_h || true)" ]; then
  pip_src=()
  if [ "$MODE" = offline ]; then pip_src=(--no-index --find-links "$DIR/wheels"); fi
  log "installing cudnn-frontend's headers ($CUDNN_FRONTEND_WHEEL) into $VENV"
  "$VENV/bin/python" -m pip install -q --no-cache-dir --no-deps "${pip_src[@]}" "$CUDNN_FRONTEND_WHEEL" ||
    die "pip install $CUDNN_FRONTEND_WHEEL into $VENV failed"
  [ -n "$(cudnn_frontend_h || true)" ] || die "no include/cudnn_frontend.h in $VENV after installing $CUDNN_FRONTEND_WHEEL"
fi
"$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null
