#!/usr/bin/env bash
# ctest conv_floor.rehearsal (label integration): scripts/bench/conv_floor.py (issue 53's convolution
# floor) on the CPU at a tiny size, for the OpenKBP baseline, the nnU-Net-like U-Net, its 2D form and
# the MLPerf 3D U-Net: one JSON line per network that counts every convolution module the network
# has (each reached once by a forward pass), times each shape's forward, data gradient (none for the
# first convolution: a step never needs its input's gradient) and weight gradient, and sums them
# (floor_ms = forward + dgrad + wgrad); the OpenKBP baseline's stride-2 4^3 convolutions are timed again as
# space-to-depth + stride-1 convolutions, equal to them in float32. Exit 77 (skipped) without a Python that has torch.
#   tests/bundle/conv_floor_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
source "$(dirname "$0")/../support/torch_test.sh"
torch_test_setup conv-floor "$@"
common=(--device cpu --batch 1 --steps 1 --warmup 0 --threads 1 --precision fp32 --top 100)
fail=0
while read -r name args; do
  # shellcheck disable=SC2086
  out="$("$PY" "$SRC/scripts/bench/conv_floor.py" "${common[@]}" $args 2>/dev/null | tail -n 1)" \
    || { echo "FAIL: $name: conv_floor.py exit $?"; fail=1; continue; }
  OUT="$out" ARGS="$args" "$PY" - "$SRC" "$name" <<'PY' || fail=1
import json, os, shlex, sys
sys.path.insert(0, os.path.join(sys.argv[1], "scripts", "bench"))
import torch.nn as nn
from pytorch_step import build, make_parser, parse_args
d = json.loads(os.environ["OUT"])
a = parse_args(shlex.split(os.environ["ARGS"]) + ["--device", "cpu"])
convs = sum(isinstance(m, (nn.Conv3d, nn.ConvTranspose3d, nn.Conv2d, nn.ConvTranspose2d)) for m in build(a).modules())
errors = []
if d["benchmark"] != "conv_floor": errors.append("not a conv_floor line")
if d["convolutions"] != convs: errors.append(f"{d['convolutions']} convolutions timed, the network has {convs}")
if sum(r["count"] for r in d["top"]) > convs or d["shapes"] > convs: errors.append("more shapes than convolutions")
if abs(d["floor_ms"] - (d["forward_ms"] + d["dgrad_ms"] + d["wgrad_ms"])) > 1e-3: errors.append("floor != the sum")
if not all(r["forward_ms"] > 0 and r["wgrad_ms"] > 0 for r in d["top"]): errors.append("a shape without a time")
if sum(r["dgrad_ms"] == 0 for r in d["top"]) != 1:
    errors.append("not exactly one shape (the first convolution's) without a data gradient")
from space_to_depth import candidate
strided = sum(candidate(m) for m in build(a).modules())
s2d = d.get("space_to_depth")
if not strided and s2d is not None: errors.append(f"space_to_depth {s2d} for a network without stride-2 4^3 convolutions")
if strided and (s2d is None or s2d["convolutions"] != strided): errors.append(f"space_to_depth {s2d}: expected {strided} convolutions")
if strided and s2d and not (s2d["max_rel_diff"] < 1e-5 and s2d["strided_ms"] > 0 and s2d["s2d_ms"] > 0):
    errors.append(f"space_to_depth {s2d}: not the same convolution in float32, or not timed")
print(f"{sys.argv[2]}: {d['convolutions']} convolutions in {d['shapes']} shapes, floor {d['floor_ms']:.1f} ms (CPU)")
for e in errors: print(f"FAIL: {sys.argv[2]}: {e}")
sys.exit(1 if errors else 0)
PY
done <<'NETS'
openkbp --arch openkbp --filters 2 --size 64
unet --arch unet --levels 3 --base-filters 4 --max-filters 16 --size 16
unet2d --arch unet --dims 2 --levels 3 --base-filters 4 --max-filters 16 --norm batch --size 32
mlperf --arch mlperf_unet3d --levels 3 --base-filters 4 --max-filters 16 --size 16
NETS
[ "$fail" = 0 ] && echo PASS || exit 1
