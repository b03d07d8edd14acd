#!/usr/bin/env python3
"""Reads TensorBoard event files written by the trainer (logging.tensorboard) back with the
tensorboard package's own readers and compares them with an expectation.

    python tests/python/read_tensorboard.py RUN/tensorboard --expect expect.json
    python tests/python/read_tensorboard.py RUN/tensorboard/events.out.tfevents.... --dump

Run it with a Python that has tensorboard (and numpy): the LibTorch setup's virtual environment
has both (~/.cache/unet3d-trainer/torch-<version>/bin/python).

EVENTS_FILE_OR_DIR: one events file, or a folder whose *tfevents* files are read in name order
(as TensorBoard reads a run).

Three readings must agree with the expectation:
- framing: every record of every file is checked here (lengths, masked CRC-32C of the length and
  of the data). TensorBoard itself stops silently at a bad or truncated record, so this is what
  catches corruption;
- legacy: tensorboard.backend.event_processing.event_accumulator.EventAccumulator
  (Scalars, Images), keeping every event (size_guidance 0);
- plugin: plugin_event_accumulator.EventAccumulator, the one `tensorboard --logdir` serves,
  after its data_compat migration of simple_value / image to the scalars / images plugins.
Both accumulators run with purge_orphaned_data=True (TensorBoard's default): a SessionLog START at
step S drops the events with step >= S read before it; the plugin one skips the first START of a
run (tensorflow/tensorboard#4763), which is why every trainer run writes one when it opens.

EXPECT.json:
    {"scalars": {"loss/train": [[step, value], ...], ...},          # after purging, in file order
     "images": {"slice": [[step, height, width, "sha256 of the PNG bytes"], ...]},  # or [step] / [step, h, w]
     "session_start_steps": [0, 5]}                                 # the raw START records, in order
Scalar values are compared as float32 bit patterns (NaN matches NaN: write NaN, Infinity,
-Infinity or the strings "nan", "inf", "-inf"). Every tag with points must be expected (unless
--allow-extra-tags), and every expected tag must have exactly the expected points (an empty list:
none, e.g. all purged). A missing top-level key means "nothing".

Prints one line per matched tag; exits 1 naming the first mismatch (2 for usage errors).
--dump prints every record read (raw, before purging) and both accumulators' contents instead.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util


class Mismatch(Exception):
    pass


def event_files(path):
    if os.path.isdir(path):
        files = sorted(f for f in glob.glob(os.path.join(path, "*")) if "tfevents" in os.path.basename(f))
        if not files:
            raise Mismatch(f"{path}: no *tfevents* file in the folder")
        return files
    if not os.path.isfile(path):
        raise Mismatch(f"{path}: no such file or folder")
    return [path]


def check_framing(path):
    """The record payloads of one file; Mismatch naming the file and offset on any framing error."""
    with open(path, "rb") as f:
        data = f.read()
    records, pos = [], 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise Mismatch(f"{path}: truncated record header at offset {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if length_crc != masked_crc32c(data[pos : pos + 8]):
            raise Mismatch(f"{path}: bad length CRC in the record at offset {pos}")
        if len(data) - pos - 16 < length:
            raise Mismatch(f"{path}: truncated record at offset {pos} (length {length})")
        payload = data[pos + 12 : pos + 12 + length]
        (data_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if data_crc != masked_crc32c(payload):
            raise Mismatch(f"{path}: bad data CRC in the record at offset {pos}")
        records.append(payload)
        pos += 16 + length
    return records


def raw_events(path):
    """The file's events as TensorBoard's own record reader yields them (no compat migration)."""
    return list(event_file_loader.LegacyEventFileLoader(path).Load())


def f32(x):
    """A JSON number or "nan"/"inf"/"-inf" as float32: its value and bit pattern; all NaNs alike."""
    if isinstance(x, str):
        x = float(x)
    if math.isnan(x):
        return "nan"
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    return f"{struct.unpack('<f', struct.pack('<f', x))[0]!r} (0x{bits:08x})"


def fmt_value(v):
    return repr(struct.unpack("<f", struct.pack("<f", v))[0]) if not math.isnan(v) else "nan"


def legacy_view(path):
    acc = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0}, purge_orphaned_data=True
    ).Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags[event_accumulator.SCALARS]}
    images = {
        t: [(e.step, e.height, e.width, hashlib.sha256(e.encoded_image_string).hexdigest()) for e in acc.Images(t)]
        for t in tags[event_accumulator.IMAGES]
    }
    return scalars, images


def plugin_view(path):
    acc = plugin_event_accumulator.EventAccumulator(
        path, size_guidance={plugin_event_accumulator.TENSORS: 0}, purge_orphaned_data=True
    ).Reload()
    scalars = {}
    for tag in acc.PluginTagToContent("scalars") if "scalars" in acc.ActivePlugins() else {}:
        scalars[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in acc.Tensors(tag)]
    images = {}
    for tag in acc.PluginTagToContent("images") if "images" in acc.ActivePlugins() else {}:
        rows = []
        for e in acc.Tensors(tag):
            w, h, *pngs = e.tensor_proto.string_val  # [width, height, png...]
            for png in pngs:
                rows.append((e.step, int(h), int(w), hashlib.sha256(png).hexdigest()))
        images[tag] = rows
    return scalars, images


def session_starts(events):
    return [
        e.step for e in events if e.HasField("session_log") and e.session_log.status == event_pb2.SessionLog.START
    ]


def describe(e):
    if e.HasField("file_version"):
        return f"file_version {e.file_version!r}"
    if e.HasField("session_log"):
        return f"session_log {event_pb2.SessionLog.SessionStatus.Name(e.session_log.status)}"
    if e.HasField("summary"):
        parts = []
        for v in e.summary.value:
            if v.HasField("simple_value"):
                parts.append(f"scalar {v.tag}={fmt_value(v.simple_value)}")
            elif v.HasField("image"):
                im = v.image
                sha = hashlib.sha256(im.encoded_image_string).hexdigest()
                parts.append(
                    f"image {v.tag} {im.height}x{im.width} colorspace {im.colorspace} "
                    f"{len(im.encoded_image_string)} bytes sha256 {sha[:16]}"
                )
            else:
                parts.append(f"value {v.tag} ({v.WhichOneof('value')})")
        return "summary " + ", ".join(parts)
    return f"other ({e.WhichOneof('what')})"


def dump(path, files):
    for f in files:
        records = check_framing(f)
        events = raw_events(f)
        print(f"file {f}: {len(records)} records, {len(events)} read by TensorBoard")
        for e in events:
            print(f"  step {e.step:>6}  wall_time {e.wall_time:.6f}  {describe(e)}")
    for name, (scalars, images) in (("legacy", legacy_view(path)), ("plugin", plugin_view(path))):
        print(f"{name} accumulator (purge_orphaned_data=True):")
        for tag, rows in sorted(scalars.items()):
            print(f"  scalar {tag}: " + ", ".join(f"({s}, {fmt_value(v)})" for s, v in rows))
        for tag, rows in sorted(images.items()):
            print(f"  image {tag}: " + ", ".join(f"({s}, {h}x{w}, {sha[:16]})" for s, h, w, sha in rows))


def compare(path, files, expect, allow_extra):
    all_events = []
    for f in files:
        records = check_framing(f)
        events = raw_events(f)
        if len(events) != len(records):
            raise Mismatch(f"{f}: TensorBoard read {len(events)} events of the {len(records)} records")
        if not events or events[0].file_version != "brain.Event:2":
            raise Mismatch(f"{f}: the first record is not file_version 'brain.Event:2'")
        all_events += events
    print(f"ok framing: {len(files)} file(s), {len(all_events)} records")

    exp_scalars = {t: [(int(s), f32(v)) for s, v in rows] for t, rows in expect.get("scalars", {}).items()}
    # An expected image row may stop after the step, or after height and width.
    exp_images = {t: [tuple(int(x) if i < 3 else x for i, x in enumerate(r)) for r in rows]
                  for t, rows in expect.get("images", {}).items()}
    image_fields = {t: min((len(r) for r in rows), default=4) for t, rows in exp_images.items()}

    for name, (scalars, images) in (("legacy", legacy_view(path)), ("plugin", plugin_view(path))):
        for kind, got_all, exp_all, key in (
            ("scalar", scalars, exp_scalars, lambda r: (r[0], f32(r[1]))),
            ("image", images, exp_images, lambda r: r),
        ):
            for tag in sorted(set(got_all) | set(exp_all)):
                rows = got_all.get(tag, [])  # a tag whose every point was purged has none
                if tag not in exp_all:
                    if allow_extra or not rows:
                        continue
                    raise Mismatch(f"{name} {kind} {tag}: in the file but not expected ({len(rows)} points)")
                got = [key(r) for r in rows]
                if kind == "image":
                    got = [r[: image_fields[tag]] for r in got]
                want = exp_all[tag]
                if got != want:
                    i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    raise Mismatch(
                        f"{name} {kind} {tag}: point {i}: got {got[i] if i < len(got) else 'nothing'}, "
                        f"expected {want[i] if i < len(want) else 'nothing'} ({len(got)} points, {len(want)} expected)"
                    )
                steps = [r[0] for r in got]
                print(f"ok {name} {kind} {tag}: {len(got)} points" + (f", steps {steps}" if steps else ""))

    got_starts = session_starts(all_events)
    want_starts = [int(s) for s in expect.get("session_start_steps", [])]
    if got_starts != want_starts:
        raise Mismatch(f"session_start_steps: got {got_starts}, expected {want_starts}")
    print(f"ok session_start_steps {got_starts}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", metavar="EVENTS_FILE_OR_DIR")
    ap.add_argument("--expect", metavar="EXPECT.json")
    ap.add_argument("--dump", action="store_true", help="print everything read")
    ap.add_argument("--allow-extra-tags", action="store_true", help="tags not in the expectation are not a mismatch")
    args = ap.parse_args()
    if not args.dump and not args.expect:
        ap.error("give --expect EXPECT.json, --dump or both")
    try:
        files = event_files(args.path)
        if args.dump:
            dump(args.path, files)
        if args.expect:
            with open(args.expect) as f:
                expect = json.load(f)
            compare(args.path, files, expect, args.allow_extra_tags)
    except Mismatch as e:
        print(f"MISMATCH: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
