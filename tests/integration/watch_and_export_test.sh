#!/usr/bin/env bash
# ctest watch_and_export (label integration): what a user sees of a run and takes away from it, on
# the CPU, end to end through the trainer and the Python packages users load the files with.
#   1. a 2-epoch segmentation run with TensorBoard on, output to a file: no carriage returns or
#      escape codes, progress lines; progress.png/.svg written; the events file read back by
#      Python's tensorboard package: every metrics.csv column per epoch at the right steps with the
#      csv's values, step/train_loss and step/lr every step, the progress and val images;
#   2. --resume of a run stopped after epoch 1: TensorBoard drops what came after the checkpoint
#      (session start), and `trainer plot` redraws the plot from metrics.csv;
#   3. the same run under a pseudo-terminal (script(1)): the status line is drawn and cleared with
#      escape codes and log lines start on their own line;
#   4. `trainer export` of the best checkpoint in every format; scripts/python/check_export.py loads
#      each with default arguments (torch.load weights_only, the safetensors package,
#      torch.jit.load, onnx) and compares u3d_model.py's forward with the traced C++ network;
#      a resenc_unet and an openkbp_baseline export too; a missing checkpoint is one line, exit 2.
# Exit 77 (skipped) only without a Python that has torch; with one, a missing tensorboard,
# safetensors or onnx package is a failure (scripts/setup.sh installs them).
#   tests/integration/watch_and_export_test.sh BUILD_DIR [VENV_PYTHON]
set -euo pipefail
source "$(dirname "$0")/../support/torch_test.sh"
torch_test_setup watch "$@"
TRAINER="$BUILD/trainer"
"$PY" -c "import tensorboard, safetensors, onnx, onnxscript" ||
  { echo "FAIL: $PY lacks tensorboard/safetensors/onnx/onnxscript (scripts/setup.sh installs them)"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }

"$TRAINER" synth --task segmentation --cases 6 --size 16 --seed 0 --out seg.h5 >/dev/null 2>&1
cat > exp.yaml <<EOF
experiment: {name: watch, output_dir: $T/runs, seed: 7}
data: {path: $T/seg.h5, batch_size: 2, patch_size: 16, normalize: [zscore]}
model: {levels: 2, base_filters: 4}
training: {epochs: 2, steps_per_epoch: 3, lr: 0.003, threads: 1, device: cpu, val_patch_batches: 1}
checkpoint: {keep_last: 10}
logging: {progress: auto, progress_seconds: 0.000001, tensorboard: true, tensorboard_steps: 1, step_log: true}
EOF
RUN="$T/runs/watch"

# 1. Output to a file.
"$TRAINER" --config exp.yaml > out.log 2>&1 || { cat out.log; fail "training run"; }
if grep -q $'\r' out.log || grep -q $'\033' out.log; then fail "escape codes or carriage returns in a log file"; fi
grep -q "epoch 1/2 step 1/3" out.log || { cat out.log; fail "no progress line in lines mode"; }
for f in progress.png progress.svg metrics.csv; do [ -s "$RUN/$f" ] || fail "$RUN/$f missing"; done
# The expectation: every metrics.csv column at its epoch's global step, the loss and lr of every
# step as steps.csv has them, the progress plot once per epoch, one session start per process.
expect() {
  "$PY" - "$RUN" "$@" <<'PY'
import csv, json, sys
run, starts = sys.argv[1], [int(s) for s in sys.argv[2:]]
epochs = list(csv.DictReader(open(f"{run}/metrics.csv")))
steps = list(csv.DictReader(open(f"{run}/steps.csv")))
scalars = {}
for r in epochs:
    for k, v in r.items():
        if k != "step" and v != "":
            scalars.setdefault("epoch/" + k, []).append([int(r["step"]), float(v)])
scalars["step/train_loss"] = [[int(r["step"]), float(r["loss"])] for r in steps]
scalars["step/lr"] = [[int(r["step"]), float(r["lr"])] for r in steps]
json.dump({"scalars": scalars, "images": {"progress": [[int(r["step"]), 900, 900] for r in epochs]},
           "session_start_steps": starts}, sys.stdout)
PY
}
expect 0 > expect.json
"$PY" "$SRC/tests/python/read_tensorboard.py" "$RUN/tensorboard" --expect expect.json --allow-extra-tags ||
  fail "TensorBoard events of the run"
"$PY" "$SRC/tests/python/read_tensorboard.py" "$RUN/tensorboard" --dump > dump.txt || fail "tensorboard --dump"
grep -q "image val/.*/prediction" dump.txt || fail "no validation slice images in TensorBoard"

# 2. Resumed from epoch 1's checkpoint after the run finished: the second process redoes steps
# 4..6; its session start at step 4 makes TensorBoard drop the first process's events from step 4.
"$TRAINER" --config exp.yaml --resume "$RUN/checkpoints/epoch_0001.pt" > resumed.log 2>&1 ||
  { cat resumed.log; fail "resume"; }
[ "$(ls "$RUN"/tensorboard/events.out.tfevents.* | wc -l)" = 2 ] || fail "one events file per process expected"
expect 0 4 > expect_resumed.json
"$PY" "$SRC/tests/python/read_tensorboard.py" "$RUN/tensorboard" --expect expect_resumed.json --allow-extra-tags ||
  fail "TensorBoard after the resume (session start at step 4)"
rm "$RUN/progress.png" "$RUN/progress.svg"
"$TRAINER" plot "$RUN" > plot.log 2>&1 || { cat plot.log; fail "trainer plot"; }
[ -s "$RUN/progress.png" ] && [ -s "$RUN/progress.svg" ] || fail "trainer plot wrote no files"
if "$TRAINER" plot "$T/nowhere" > plot_missing.log 2>&1; then fail "trainer plot of a missing run succeeded"; fi
[ "$(wc -l < plot_missing.log)" = 1 ] && grep -q "metrics.csv" plot_missing.log ||
  { cat plot_missing.log; fail "one line naming metrics.csv"; }

# 3. Under a pseudo-terminal.
if command -v script >/dev/null; then
  rm -rf "$RUN"
  script -q -e -c "TERM=xterm '$TRAINER' --config exp.yaml --set logging.tensorboard=false" tty.log > /dev/null ||
    { cat tty.log; fail "training under a pseudo-terminal"; }
  # The phases, each counted as tqdm does: n/total [elapsed<remaining, rate], then the run's ETA.
  grep -q $'\r\033\[Ktraining epoch 1/2 ' tty.log || fail "no training status line drawn on the terminal"
  grep -qE '[0-9]+/[0-9]+ \[[0-9:]+<[0-9:?]+, +([0-9.]+(it/s|s/it)|\?it/s)\] \| run ETA' tty.log ||
    fail "status line without tqdm's [elapsed<remaining, rate] and the run's ETA"
  grep -q $'\r\033\[Kvalidating epoch 1/2 ' tty.log || fail "no validating phase on the status line"
  grep -q $'\r\033\[Kcheckpointing epoch 1/2 ' tty.log || fail "no checkpointing phase on the status line"
  # Every log line starts at the beginning of a line or right after the erase-line code.
  "$PY" - tty.log <<'PY' || fail "a log line collided with the status line"
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
for m in re.finditer(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\]", text):
    before = text[max(0, m.start() - 3):m.start()]
    if m.start() > 0 and not (before.endswith("\n") or before.endswith("\033[K")):
        sys.exit(f"log line at offset {m.start()} follows {before!r}")
PY
else
  echo "note: script(1) not found; the terminal part is not run"
fi

# 4. Export.
U3D_PYTHON="$PY" "$TRAINER" export "$RUN" --format safetensors,pt,torchscript,onnx > export.log 2>&1 ||
  { cat export.log; fail "trainer export"; }
"$PY" "$SRC/scripts/python/check_export.py" "$RUN/export" || fail "check_export.py (unet)"
rc=0
"$TRAINER" export "$RUN" --checkpoint "$RUN/checkpoints/none.pt" > missing.log 2>&1 || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l < missing.log)" = 1 ] && grep -q "none.pt" missing.log ||
  { cat missing.log; fail "export of a missing checkpoint: exit $rc, expected 2 and one line naming it"; }
cp -r "$RUN" "$T/damaged"
truncate -s 1000 "$T/damaged/checkpoints/best.pt"
rc=0
"$TRAINER" export "$T/damaged" --checkpoint "$T/damaged/checkpoints/best.pt" --out "$T/damaged_export" > damaged.log 2>&1 || rc=$?
[ "$rc" != 0 ] && [ "$(wc -l < damaged.log)" = 1 ] && grep -q "best.pt" damaged.log || { cat damaged.log; fail "export of a corrupt checkpoint: exit $rc, expected one line naming it"; }
[ ! -e "$T/damaged_export/model.pt" ] || fail "a failed export left files"

"$TRAINER" --config exp.yaml --set experiment.name=resenc --set model.architecture=resenc_unet \
  --set model.blocks_per_level=[1,2] --set model.convs_per_level=1 --set model.deep_supervision=true \
  --set training.epochs=1 --set logging.tensorboard=false > resenc.log 2>&1 || { cat resenc.log; fail "resenc run"; }
"$TRAINER" export "$T/runs/resenc" --checkpoint last --out "$T/resenc_export" > /dev/null 2>&1 || fail "export resenc"
"$PY" "$SRC/scripts/python/check_export.py" "$T/resenc_export" || fail "check_export.py (resenc_unet)"

"$TRAINER" synth --task dose --cases 4 --size 64 --seed 0 --out dose.h5 >/dev/null 2>&1
cat > kbp.yaml <<EOF
experiment: {name: kbp, output_dir: $T/runs, seed: 7}
data: {path: $T/dose.h5, batch_size: 1, patch_size: 64, target_scale: 70,
       normalize: ["clip:-1000:1000", none, none, none, none]}
model: {architecture: openkbp_baseline, base_filters: 2}
training: {epochs: 1, steps_per_epoch: 1, threads: 1, device: cpu}
EOF
"$TRAINER" --config kbp.yaml > kbp.log 2>&1 || { cat kbp.log; fail "openkbp_baseline run"; }
"$TRAINER" export "$T/runs/kbp" --checkpoint last --out "$T/kbp_export" > /dev/null 2>&1 || fail "export openkbp"
"$PY" "$SRC/scripts/python/check_export.py" "$T/kbp_export" || fail "check_export.py (openkbp_baseline)"
echo "ok"
