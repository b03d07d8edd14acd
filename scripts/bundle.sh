#!/usr/bin/env bash
# Builds the release (scripts/build.sh) and writes the portable bundle
#   dist/unet3d-trainer-<version>-linux-x86_64.tar.gz
# that runs on a machine's own PyTorch (docs/install.md, "On a GPU box"). Layout of the bundle:
#   bin/trainer               launcher: finds and checks LibTorch, runs libexec/trainer
#   libexec/trainer           the real binary, RUNPATH $ORIGIN/../lib
#   libexec/tests/u3d_gpu_tests the GPU tests (scripts/gpu-check.sh and speed.sh run them; the CPU
#                             suites stay in the build tree: CI runs them)
#   libexec/u3d-run           the loader step shared by both
#   lib/                      every shared library the executables need that is neither glibc,
#                             the C++ runtime, nor LibTorch/CUDA (found with ldd, not listed by hand)
#   share/unet3d-trainer/     bundle.env (what it was built for), tests.tsv (label, executable,
#                             test of every GPU test), manifest.txt (files, SHA-256)
#   configs/ scripts/gpu-check.sh scripts/bench/ scripts/python/ docs/ README.md LICENSE
# Checks before packing: RUNPATH of every executable, no build-machine path in any file (source
# and build folders, the LibTorch prefix), glibc symbol versions needed (<= 2.35, Ubuntu 22.04).
#
#   scripts/bundle.sh [--no-build] [--out DIR]      (U3D_BUILD_DIR: build folder, default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BUILD="${U3D_BUILD_DIR:-$ROOT/build/release}"
OUT="$ROOT/dist"
DO_BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) DO_BUILD=0 ;;
    --out) OUT="$2"; shift ;;
    *) echo "bundle.sh: unknown argument '$1'; expected --no-build or --out DIR" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "[bundle] $*" >&2; }
fail() { echo "[bundle] error: $*" >&2; exit 1; }

if [ "$DO_BUILD" = 1 ]; then scripts/build.sh release >&2; fi
[ -x "$BUILD/trainer" ] || fail "$BUILD/trainer not built; run scripts/build.sh release"
BUILD="$(cd "$BUILD" && pwd)"

# The LibTorch the build linked: Torch_DIR = <torch>/share/cmake/Torch.
torch_dir="$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")"
TORCH_ROOT="$(cd "$torch_dir/../../.." && pwd -P)"
TORCH_LIB="$TORCH_ROOT/lib"
[ -f "$TORCH_LIB/libtorch.so" ] || fail "no libtorch.so in $TORCH_LIB (from Torch_DIR=$torch_dir)"
if [ -f "$TORCH_ROOT/version.py" ]; then
  torch_version="$(sed -n "s/^__version__ *= *['\"]\([^'\"]*\)['\"].*/\1/p" "$TORCH_ROOT/version.py" | head -n1)"
  torch_cuda="$(sed -n "s/^cuda[^=]*= *['\"]\([^'\"]*\)['\"].*/\1/p" "$TORCH_ROOT/version.py" | head -n1)"
elif [ -f "$TORCH_ROOT/build-version" ]; then
  torch_version="$(head -n1 "$TORCH_ROOT/build-version")"
  torch_cuda=""
  case "$torch_version" in *+cu[0-9]*) c="${torch_version##*+cu}"; torch_cuda="${c%?}.${c: -1}" ;; esac
else
  fail "cannot tell the LibTorch version in $TORCH_ROOT (no version.py or build-version)"
fi
# A binary built against a CUDA LibTorch links libtorch_cuda; one built against a CPU LibTorch does not.
if ! readelf -d "$BUILD/trainer" | grep -q 'libtorch_cuda.so'; then torch_cuda=""; fi
version="$(sed -n 's/^project(unet3d_trainer VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)"
commit="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
NAME="unet3d-trainer-$version-linux-$(uname -m)"
log "bundling $NAME (commit $commit) for torch ${torch_version%%+*} ${torch_cuda:+CUDA $torch_cuda}"

STAGE_PARENT="$(mktemp -d)"
trap 'rm -rf "$STAGE_PARENT"' EXIT
S="$STAGE_PARENT/$NAME"
cmake --install "$BUILD" --prefix "$S" --component bundle --strip >/dev/null
[ -x "$S/libexec/trainer" ] || fail "cmake --install wrote no libexec/trainer"
install -m 755 scripts/bundle/trainer -D "$S/bin/trainer"
install -m 755 scripts/bundle/u3d-run "$S/libexec/u3d-run"
mkdir -p "$S/share/unet3d-trainer" "$S/lib" "$S/scripts"
cat > "$S/share/unet3d-trainer/bundle.env" <<ENV
# What this bundle was built for (read by libexec/u3d-run and scripts/gpu-check.sh).
U3D_BUNDLE_VERSION=$version
U3D_BUNDLE_COMMIT=$commit
U3D_BUNDLE_TORCH=${torch_version%%+*}
U3D_BUNDLE_CUDA=$torch_cuda
U3D_BUNDLE_BUILT_ON="$(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
ENV
cp -r configs docs README.md LICENSE "$S/"
cp scripts/gpu-check.sh "$S/scripts/"
cp -r scripts/bench scripts/python "$S/scripts/"
find "$S/scripts" -name __pycache__ -prune -exec rm -rf {} +

# Tests: label, executable and GoogleTest name of every ctest test of the executables in the bundle.
ctest --test-dir "$BUILD" --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
d = json.load(sys.stdin)
for t in d["tests"]:
    cmd = t.get("command") or []
    labels = [p["value"] for p in t.get("properties", []) if p["name"] == "LABELS"]
    label = (labels[0][0] if labels and labels[0] else "none")
    flt = next((a.split("=", 1)[1] for a in cmd if a.startswith("--gtest_filter=")), "")
    if cmd and flt and os.path.exists(os.path.join(sys.argv[1], os.path.basename(cmd[0]))):
        print(f"{label}\t{os.path.basename(cmd[0])}\t{flt}")
' "$S/libexec/tests" > "$S/share/unet3d-trainer/tests.tsv"
[ -s "$S/share/unet3d-trainer/tests.tsv" ] || fail "ctest --show-only listed no tests in $BUILD"
for exe in $(cut -f2 "$S/share/unet3d-trainer/tests.tsv" | sort -u); do
  [ -x "$S/libexec/tests/$exe" ] || fail "tests.tsv names $exe but the bundle has no libexec/tests/$exe"
done

# Shared libraries: the closure ldd reports for every executable, less glibc, the C++ runtime (the
# box's PyTorch needs the system's own, and a process has one) and LibTorch/CUDA (the box's).
nv_paths="$(find "$TORCH_ROOT/.." -maxdepth 4 -type d -path '*/nvidia/*/lib' 2>/dev/null | tr '\n' ':')"
# LibTorch and CUDA by name too: a system CUDA (e.g. /usr/local/lib/libcudart.so.13) may shadow the wheel's.
# libexpat (fontconfig's XML parser, for the plots' text): Debian 12's needs glibc 2.36, and every
# box with a Python (so every PyTorch box) has its own libexpat.so.1.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libmvec\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia|libtorch|libc10|libcaffe2|libshm|libgomp|libcudart|libcublas|libcudnn|libcufft|libcufile|libcurand|libcusolver|libcusparse|libnccl|libnvrtc|libnvJitLink|libnvToolsExt|libnvshmem|libcupti|libnvperf|libexpat)'
elfs=()
while IFS= read -r f; do elfs+=("$f"); done < <(find "$S/libexec" -type f -perm -u+x ! -name u3d-run)
for f in "${elfs[@]}"; do
  LD_LIBRARY_PATH="$TORCH_LIB:$nv_paths" ldd "$f" | while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ "$name" =~ $skip_re ]] && continue
    [ "$path" = "not" ] && fail "$(basename "$f") needs $name, which ldd does not find"
    real="$(readlink -f "$path")"
    case "$real" in "$TORCH_ROOT"/*|"$(dirname "$TORCH_ROOT")"/nvidia/*) continue ;; esac
    [ -f "$S/lib/$name" ] || cp -L "$path" "$S/lib/$name"
  done
done
chmod 644 "$S"/lib/*
log "lib/: $(ls "$S/lib" | tr '\n' ' ')"

# Checks: RUNPATH, no build-machine path, glibc versions.
for f in "${elfs[@]}"; do
  rp="$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  case "$f" in
    */libexec/tests/*) want='$ORIGIN/../../lib' ;;
    *) want='$ORIGIN/../lib' ;;
  esac
  [ "$rp" = "$want" ] || fail "$(basename "$f"): RUNPATH '$rp', expected '$want'"
done
for p in "$ROOT" "$BUILD" "$TORCH_ROOT" "$(readlink -f "$TORCH_ROOT")" "$HOME/.cache"; do
  if hits="$(grep -rlaF "$p" "$S/libexec" "$S/lib" "$S/bin")"; then
    fail "build-machine path $p found in: $(echo "$hits" | tr '\n' ' ')"
  fi
done
glibc_max="$(for f in "${elfs[@]}" "$S"/lib/*; do objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' || true; done | sort -uV | tail -n1)"
glibcxx_max="$(for f in "${elfs[@]}" "$S"/lib/*; do objdump -T "$f" | grep -o 'GLIBCXX_[0-9.]*' || true; done | sort -uV | tail -n1)"
if [ "$(printf '%s\n' "$glibc_max" GLIBC_2.35 | sort -V | tail -n1)" != GLIBC_2.35 ]; then
  fail "the binaries need $glibc_max; Ubuntu 22.04 has GLIBC_2.35"
fi
echo "U3D_BUNDLE_NEEDS=\"$glibc_max $glibcxx_max\"" >> "$S/share/unet3d-trainer/bundle.env"

(cd "$S" && find . -type f ! -name manifest.txt -print0 | sort -z | xargs -0 sha256sum) > "$S/share/unet3d-trainer/manifest.txt"
mkdir -p "$OUT"
TAR="$OUT/$NAME.tar.gz"
tar -C "$STAGE_PARENT" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$NAME" | gzip -9n > "$TAR.tmp"
mv "$TAR.tmp" "$TAR"
size=$(stat -c %s "$TAR")
log "needs $glibc_max, $glibcxx_max; unpacked $(du -sh "$S" | cut -f1), compressed $((size / 1024 / 1024)) MiB ($size bytes)"
[ "$size" -lt $((64 * 1024 * 1024)) ] || fail "$TAR is $size bytes; the bundle must stay under 64 MiB"
echo "$TAR"
